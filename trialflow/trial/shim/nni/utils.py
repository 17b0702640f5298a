"""``nni.utils.merge_parameter``, which NNI's own examples use to fold the tuner's parameters
into their argparse defaults (only loaded where the real nni is absent: see ``nni``)."""


def merge_parameter(base_params, override_params):
    """``base_params`` (an argparse Namespace or a dict) updated from ``override_params``, as
    NNI does it: every key must already exist there, and a value must keep the type the
    default has (unless the default is None)."""
    if override_params is None:
        return base_params
    is_dict = isinstance(base_params, dict)
    for key, value in override_params.items():
        known = key in base_params if is_dict else hasattr(base_params, key)
        if not known:
            raise ValueError(f"Key '{key}' not found in base parameters.")
        current = base_params[key] if is_dict else getattr(base_params, key)
        if current is not None and type(current) is not type(value):
            raise TypeError(
                f"Expected '{key}' in override parameters to have type '{type(current).__name__}', "
                f"but found '{type(value).__name__}'."
            )
        if is_dict:
            base_params[key] = value
        else:
            setattr(base_params, key, value)
    return base_params
