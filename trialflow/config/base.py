"""Shared pieces of the config models: NNI's key matching, paths, secrets, units.

NNI matches keys case- and underscore-insensitively (``ssh_key_file`` ==
``sshKeyFile``) and rejects unknown keys; :class:`NniModel` does the same by
renaming incoming keys to the canonical camelCase alias before pydantic sees
them, so pydantic's own ``extra="forbid"`` reports what is left over.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    SecretStr,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel

from trialflow.config.files import RewrittenInt
from trialflow.config.units import parse_duration, parse_size_mb


def normalize_key(key: object) -> str:
    """The form NNI compares keys in: lower case, no underscores."""
    return str(key).replace("_", "").lower()


class NniModel(BaseModel):
    """Base for every config section: camelCase aliases, NNI key matching, no unknown keys."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=False,
        frozen=False,
    )

    @model_validator(mode="before")
    @classmethod
    def _match_keys_like_nni(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        canonical: dict[str, str] = {}
        for name, field in cls.model_fields.items():
            alias: str = field.alias or name
            canonical[normalize_key(alias)] = alias
            canonical.setdefault(normalize_key(name), alias)
        renamed: dict[Any, Any] = {}
        for key, value in data.items():
            target = canonical.get(normalize_key(key), key)
            if target in renamed:
                raise ValueError(f"key {key!r} is given twice (keys match ignoring case and underscores)")
            renamed[target] = value
        return renamed

    def to_nni_dict(self) -> dict[str, Any]:
        """The config as NNI v2 YAML would spell it (camelCase, no unset keys), secrets masked."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """Relative paths resolve against the config file's folder, as in NNI."""
    value = Path(str(value)).expanduser()
    base = (info.context or {}).get("base_dir")
    if not value.is_absolute() and base is not None:
        value = Path(base) / value
    return Path(str(value))


def _to_str(value: Any) -> Any:
    # YAML turns `user: 12345` into an int; a name is still a string.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def _secret_text(value: Any) -> Any:
    """A secret is text. Digits written plainly (``password: 12345``, as in NNI's examples) are
    taken as typed; anything YAML changes or reads as another kind (``012345`` is octal 5349, a
    date, a float) is refused, and the value is never echoed."""
    if isinstance(value, (str, SecretStr)):
        return value
    if type(value) is int:  # plain digits: str() gives back exactly what was written
        return str(value)
    kind = (
        "a number YAML rewrote (octal, hex or sexagesimal)"
        if isinstance(value, RewrittenInt)
        else f"a {type(value).__name__}"
    )
    raise ValueError(
        f"a secret must be text, got {kind} (value not shown); put it in quotes in the "
        "YAML so it is read exactly as written"
    )


def _not_bool(value: Any) -> Any:
    # pydantic takes true as 1; a count or size written as true/false is a mistake.
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


def _refuse_nan_and_infinity(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value}")
    return value


def _gpu_indices(value: Any) -> Any:
    """NNI accepts a list, one int, or a comma-separated string ("0,2")."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("expected GPU indices as a list, an integer or a string like '0,1'")
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        try:
            return [int(part) for part in value.split(",") if part.strip()]
        except ValueError:
            raise ValueError(f"expected GPU indices like '0,1', got {value!r}") from None
    return value


def _non_negative_indices(value: list[int] | None) -> list[int] | None:
    if value is not None and any(i < 0 for i in value):
        raise ValueError(f"GPU indices must be >= 0, got {value}")
    return value


ConfigPath = Annotated[Path, AfterValidator(_resolve_path)]
Secret = Annotated[SecretStr, BeforeValidator(_secret_text)]
Int = Annotated[int, BeforeValidator(_not_bool)]
Float = Annotated[float, BeforeValidator(_refuse_nan_and_infinity), BeforeValidator(_not_bool)]
Seconds = Annotated[float, BeforeValidator(parse_duration)]
SizeMB = Annotated[int, BeforeValidator(parse_size_mb)]
GpuIndices = Annotated[list[int] | None, BeforeValidator(_gpu_indices), AfterValidator(_non_negative_indices)]
Str = Annotated[str, BeforeValidator(_to_str)]
