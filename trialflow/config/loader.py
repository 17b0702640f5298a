"""Read an NNI experiment config file (v1 or v2) into one validated ExperimentConfig.

Everything that is wrong is reported at once, each problem with the file, the
key path, the line when the YAML gives it, and what was expected; nothing here
raises a bare traceback at a user.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Union, cast

import yaml
from pydantic import Discriminator, SerializeAsAny, Tag, ValidationError, create_model
from pydantic_core import ErrorDetails

from trialflow.config.base import NniModel, normalize_key
from trialflow.config.errors import ConfigError, PathPart, Problem
from trialflow.config.files import (
    MAX_CONFIG_BYTES,
    MAX_SEARCH_SPACE_BYTES,
    FileProblem,
    load_json,
    load_yaml,
    read_bounded,
)
from trialflow.config.inline import is_inline, read_inline
from trialflow.config.model import ExperimentConfig
from trialflow.config.redaction import redact
from trialflow.config.search_space import SearchSpaceError, parse_search_space
from trialflow.config.v1 import convert_v1, is_v1
from trialflow.trial.function import FunctionTrialError, function_command

_SEARCH_SPACE_KEYS = ("searchspace", "searchspacefile")


# --- YAML with line numbers -----------------------------------------------------------


def _line_map(node: yaml.Node, path: tuple[PathPart, ...] = (), out: dict | None = None) -> dict:
    """Map normalized key paths to 1-based line numbers, for error messages."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key_path = path + (normalize_key(getattr(key_node, "value", "")),)
            out[key_path] = key_node.start_mark.line + 1
            _line_map(value_node, key_path, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_map(item, path + (i,), out)
    return out


def _read_yaml(path: Path) -> tuple[Any, dict]:
    try:
        text = read_bounded(path, MAX_CONFIG_BYTES, "config file")
    except FileProblem as exc:
        message = "file not found" if not path.exists() and not path.is_symlink() else exc.message
        raise ConfigError.single(path, (), message) from None
    try:
        data, node = load_yaml(text)
    except FileProblem as exc:
        raise ConfigError.single(path, (), exc.message, exc.line) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError.single(path, (), f"not valid YAML: {problem}", line) from None
    return data, (_line_map(node) if node is not None else {})


def _line_for(lines: dict, path: tuple[PathPart, ...]) -> int | None:
    norm = tuple(normalize_key(p) if isinstance(p, str) else p for p in path)
    while norm:
        if norm in lines:
            return lines[norm]
        norm = norm[:-1]
    return None


# --- the model, with every registered platform ----------------------------------------


def _platform_tag(value: Any) -> str | None:
    if isinstance(value, NniModel):
        return getattr(value, "platform", None)
    if isinstance(value, dict):
        for key, item in value.items():
            if normalize_key(key) == "platform" and isinstance(item, str):
                return item.lower()
    return None


@lru_cache(maxsize=1)
def experiment_model() -> type[ExperimentConfig]:
    """ExperimentConfig whose ``trainingService`` items are the registered platforms' models."""
    from trialflow.config.registry import platform_entries

    entries = platform_entries()
    members = tuple(Annotated[entry.config_model, Tag(name)] for name, entry in entries.items())
    union = Annotated[
        Union[members],  # type: ignore[valid-type]  # noqa: UP007 (a Union of a tuple of types built at run time)
        Discriminator(
            _platform_tag,
            custom_error_type="unknown_platform",
            custom_error_message=f"expected platform to be one of: {', '.join(sorted(entries))}",
        ),
    ]
    return create_model(
        "ExperimentConfig",
        __base__=ExperimentConfig,
        __module__=ExperimentConfig.__module__,
        training_service=(list[SerializeAsAny[union]], ...),
    )


@lru_cache(maxsize=1)
def _known_keys() -> list[str]:
    """Every key any config section accepts, for 'did you mean' hints."""
    from trialflow.config.registry import platform_entries

    seen: set[str] = set()
    stack: list[type[NniModel]] = [ExperimentConfig] + [e.config_model for e in platform_entries().values()]
    visited: set[type] = set()
    while stack:
        model = stack.pop()
        if model in visited:
            continue
        visited.add(model)
        for name, field in model.model_fields.items():
            seen.add(field.alias or name)
            for arg in _types_in(field.annotation):
                if isinstance(arg, type) and issubclass(arg, NniModel):
                    stack.append(arg)
    return sorted(seen)


def _types_in(annotation: Any) -> list[Any]:
    out = [annotation]
    for arg in getattr(annotation, "__args__", ()) or ():
        out.extend(_types_in(arg))
    return out


# --- loading --------------------------------------------------------------------------


def _pydantic_problems(
    exc: ValidationError, file: Path, lines: dict, service_is_list: bool, converted: bool
) -> list[Problem]:
    from trialflow.config.registry import platform_entries

    tags = set(platform_entries())
    problems = []
    for error in exc.errors():
        loc: list[PathPart] = list(error["loc"])
        # Drop pydantic's union tag ("trainingService", 0, "local", ...) and our list wrapping.
        if len(loc) >= 3 and loc[0] == "trainingService" and isinstance(loc[1], int) and loc[2] in tags:
            del loc[2]
        if not service_is_list and len(loc) >= 2 and loc[0] == "trainingService" and loc[1] == 0:
            del loc[1]
        message = _message(error)
        if error["type"] == "unknown_platform":
            loc.append("platform")
            given = _platform_tag(error.get("input"))
            message = (f"unknown platform {given!r}; " if given else "platform is missing; ") + message
        if converted:
            message += " (in the v2 form of this v1 config; see `trialflow convert`)"
        problems.append(Problem(file, tuple(loc), message, None if converted else _line_for(lines, tuple(loc))))
    return problems


def _message(error: ErrorDetails) -> str:
    kind, msg = error["type"], error["msg"]
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        close = difflib.get_close_matches(key, _known_keys(), n=1, cutoff=0.7)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown key (keys match ignoring case and underscores){hint}"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    given = error.get("input")
    if kind not in {"value_error", "unknown_platform"} and not isinstance(given, (dict, list)):
        msg += f", got {given!r}"
    elif isinstance(given, dict) and kind.endswith("_type"):
        msg += " (got a mapping; a value written as {like_this} in YAML is a mapping, quote it)"
    return msg


def looks_like_search_space(value: Any) -> bool:
    """A mapping with at least one ``{_type: ...}`` entry: what a searchSpaceFile must hold
    before its keys and values may be quoted in an error (any other file named there by
    mistake is described, not quoted)."""
    return isinstance(value, dict) and any(isinstance(v, dict) and "_type" in v for v in value.values())


def masked_excerpt(text: str) -> str:
    """What a file that is not a search space holds, said without showing it: its first
    three characters and its size."""
    head = text.lstrip()[:3]
    lines = text.count("\n") + (not text.endswith("\n") and bool(text))
    return f"starts {head!r}…, {lines} line{'s' if lines != 1 else ''}, {len(text)} characters"


def _load_search_space(data: dict[str, Any], file: Path, lines: dict, base_dir: Path) -> None:
    """Inline the search space (from searchSpaceFile or searchSpace) and validate it."""
    keys = {normalize_key(k): k for k in data}
    inline_key, file_key = keys.get("searchspace"), keys.get("searchspacefile")
    if inline_key and file_key:
        raise ConfigError.single(
            file, (file_key,), "set searchSpace or searchSpaceFile, not both", _line_for(lines, (file_key,))
        )
    if not inline_key and not file_key:
        raise ConfigError.single(
            file, ("searchSpace",), "required: set searchSpace (inline) or searchSpaceFile (a JSON or YAML file)"
        )
    where: tuple[PathPart, ...]
    if file_key:
        space_path = Path(str(data[file_key])).expanduser()
        if not space_path.is_absolute():
            space_path = base_dir / space_path
        line = _line_for(lines, (file_key,))
        try:
            text = read_bounded(space_path, MAX_SEARCH_SPACE_BYTES, "search space file")
        except FileProblem as exc:
            raise ConfigError.single(file, (file_key,), exc.message, line) from None
        is_json = space_path.suffix.lower() == ".json"
        try:
            space = load_json(text) if is_json else load_yaml(text)[0]
        except FileProblem as exc:
            raise ConfigError.single(space_path, (), exc.message, exc.line) from None
        except json.JSONDecodeError as exc:  # its message names a position, never the text
            raise ConfigError.single(space_path, (), f"not valid JSON: {exc.msg}", exc.lineno) from None
        except yaml.YAMLError as exc:
            # PyYAML's own message quotes the offending line: a file named here by mistake
            # (a key, /etc/shadow) would be shown to whoever reads the error.
            mark = getattr(exc, "problem_mark", None)
            problem = getattr(exc, "problem", None) or "cannot be read"
            raise ConfigError.single(
                space_path, (), f"not valid YAML: {problem}", mark.line + 1 if mark is not None else None
            ) from None
        if not looks_like_search_space(space):
            raise ConfigError.single(
                space_path,
                (),
                "not a search space: expected a mapping of parameter name -> {_type, _value} "
                f"(the file {masked_excerpt(text)}; is searchSpaceFile the right file?)",
            )
        source, where = space_path, ()
        data[file_key] = str(space_path)
    else:
        assert inline_key is not None  # one of the two keys is set (checked above)
        space, source, where = data[inline_key], file, (inline_key,)
    try:
        parse_search_space(space)
    except SearchSpaceError as exc:
        path = where + exc.path
        raise ConfigError.single(
            source, path, exc.message, _line_for(lines, path) if source == file else None
        ) from None
    data["searchSpace"] = space
    if inline_key and inline_key != "searchSpace":
        del data[inline_key]


def load_config(path: str | Path) -> ExperimentConfig:
    """Load, convert (v1) and validate an experiment config: a YAML file, or a config written in
    a DAG file (trialflow.config.inline). Raises ConfigError with every problem."""
    inline: str | None = None
    data: Any
    lines: dict[tuple[Any, ...], int]
    if is_inline(path):
        inline = str(path)
        written = read_inline(inline)
        file, base_dir, data, lines = written.origin, written.base_dir, written.data, {}  # no lines to name
    else:
        file = Path(path).expanduser().resolve()
        base_dir = file.parent
        data, lines = _read_yaml(file)
    if not isinstance(data, dict):
        raise ConfigError.single(file, (), f"expected a mapping of experiment keys, got {type(data).__name__}")
    if not any(normalize_key(k) in ("trialconcurrency", "trainingservice", "trainingserviceplatform") for k in data):
        raise ConfigError.single(
            file,
            (),
            "not an NNI experiment config (no trialConcurrency, trainingService or trainingServicePlatform key)",
        )
    converted = is_v1(data)
    if converted:
        data, problems = convert_v1(data)
        if problems:
            raise ConfigError([Problem(file, p.key_path, p.message, _line_for(lines, p.key_path)) for p in problems])
    annotation = next((v for k, v in data.items() if normalize_key(k) == "useannotation"), False)
    if annotation is True:
        raise ConfigError.single(
            file,
            ("useAnnotation",),
            "NNI annotations (code rewriting) are not supported; use "
            "nni.get_next_parameter() in the trial code and set useAnnotation: false",
            _line_for(lines, ("useAnnotation",)),
        )
    _load_search_space(data, file, lines, base_dir)
    service_key = next((k for k in data if normalize_key(k) == "trainingservice"), None)
    service_is_list = service_key is not None and isinstance(data[service_key], list)
    if service_key is not None and not service_is_list:
        data[service_key] = [data[service_key]]
    _function_in_roles(data)
    try:
        config = experiment_model().model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise ConfigError(_pydantic_problems(exc, file, lines, service_is_list, converted)) from None
    config.source_file = file
    config.inline_source = inline
    problems = _cross_checks(config, file, lines, service_is_list)
    if problems:
        raise ConfigError(problems)
    return config


_ROLE_KEYS = ("worker", "ps", "master")


def _function_in_roles(data: dict[str, Any]) -> None:
    """A Kubernetes role section without a command (Kubeflow's worker/ps/master,
    FrameworkController's taskRoles) runs the trialFunction: its command is filled in before
    validation, so a role left without one is still named in the same pass as every other
    problem when there is no trialFunction."""
    function = next((v for k, v in data.items() if normalize_key(k) == "trialfunction"), None)
    try:
        command = function_command(function) if isinstance(function, str) else None
    except FunctionTrialError:
        return  # the model names the bad import path
    services = next((v for k, v in data.items() if normalize_key(k) == "trainingservice"), None)
    if command is None or not isinstance(services, list):
        return
    for service in services:
        if not isinstance(service, dict):
            continue
        roles: list[Any] = []
        for key, value in service.items():
            name = normalize_key(key)
            if name in _ROLE_KEYS:
                roles.append(value)
            elif name == "taskroles" and isinstance(value, list):
                roles.extend(value)
        for role in roles:
            if isinstance(role, dict):
                key = next((k for k in role if normalize_key(k) == "command"), "command")
                if role.get(key) is None:
                    role[key] = command


def _cross_checks(config: ExperimentConfig, file: Path, lines: dict, service_is_list: bool) -> list[Problem]:
    """Rules that span sections, as NNI's config validation has them."""
    problems: list[Problem] = []

    def add(path: tuple[PathPart, ...], message: str) -> None:
        problems.append(Problem(file, path, message, _line_for(lines, path)))

    if config.tuner is None and config.advisor is None:
        add(("tuner",), "tuner must be set (or advisor)")
    if config.tuner is not None and config.advisor is not None:
        add(("advisor",), "set tuner or advisor, not both (an advisor is a tuner and assessor in one)")
    if config.assessor is not None and config.advisor is not None:
        add(("assessor",), "an advisor already decides early stopping; remove assessor")
    if config.use_annotation:
        add(
            ("useAnnotation",),
            "NNI annotations (code rewriting) are not supported; "
            "use nni.get_next_parameter() in the trial code and set useAnnotation: false",
        )
    if not config.training_service:
        add(("trainingService",), "at least one training service is required")
    names = [s.platform for s in config.training_service]
    if len(set(names)) != len(names):
        add(("trainingService",), f"each platform may appear once in a hybrid list, got {names}")
    for i, service in enumerate(config.training_service):
        path: tuple[PathPart, ...] = ("trainingService", i) if service_is_list else ("trainingService",)
        command = service.trial_command or config.trial_command
        if config.trial_function and command:
            where = path + ("trialCommand",) if service.trial_command else ("trialCommand",)
            add(where, "set trialCommand or trialFunction, not both (a function trial is its own command)")
        if type(service).needs_trial_command and not (command or config.trial_function):
            add(
                path + ("trialCommand",),
                "trialCommand is required (at the top level or in trainingService), or trialFunction",
            )
        gpus = service.trial_gpu_number if service.trial_gpu_number is not None else config.trial_gpu_number
        if service.platform == "local" and gpus and getattr(service, "use_active_gpu", None) is None:
            add(
                path + ("useActiveGpu",),
                "useActiveGpu must be set (true or false) when trialGpuNumber > 0, "
                "as in NNI: a desktop session keeps the GPU 'active'",
            )
    return problems


def effective_trial_command(config: ExperimentConfig, service_index: int = 0) -> str | None:
    """The service's trialCommand, else the top level's, else the command running trialFunction."""
    service = config.training_service[service_index]
    return service.trial_command or config.trial_command or config.function_command


def effective_code_directory(config: ExperimentConfig, service_index: int = 0) -> Path:
    service = config.training_service[service_index]
    return service.trial_code_directory or config.trial_code_directory


def effective_gpu_number(config: ExperimentConfig, service_index: int = 0) -> int:
    service = config.training_service[service_index]
    value = service.trial_gpu_number if service.trial_gpu_number is not None else config.trial_gpu_number
    return value or 0


def to_v2_dict(config: ExperimentConfig) -> dict[str, Any]:
    """The config in NNI v2 form (as `trialflow convert` prints it); secrets masked."""
    out = config.to_nni_dict()
    out.pop("searchSpaceFile", None)  # the space is inlined, so the printed form stands alone
    function = out.pop("trialFunction", None)
    if function:  # NNI has no function trials: the command that runs it is NNI's trialCommand
        out["trialCommand"] = config.function_command
    if out.get("scheduledRuns") == "new":
        out.pop("scheduledRuns")  # trialflow's own keys: printed only when they say something
    for key in ("retuneTopK", "objectives", "warmStart"):
        if out.get(key) is None:
            out.pop(key, None)
    if len(out.get("trainingService", [])) == 1:
        out["trainingService"] = out["trainingService"][0]
    # Secrets inside values too: a trialCommand's API_TOKEN=..., a URL's user:pass@.
    return cast("dict[str, Any]", redact(out))
