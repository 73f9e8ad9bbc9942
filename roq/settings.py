"""Settings from a TOML file plus command-line flags, checked against a config dataclass.

Every key of a section must be a field of the dataclass it configures and have that field's type; a
required field must come from the file or a flag. Anything else is an error that names the file, the
section and the key, never a silent default (the original's loader skipped every key after the first
missing one).
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import typing
from typing import Any, TypeVar

from roq.errors import ConfigError

__all__ = ["read_toml", "read_text", "parse_toml", "build", "from_args", "check_table", "missing_keys"]

T = TypeVar("T")


def read_toml(path: str) -> dict[str, Any]:
    """Parse a TOML file.

    Raises:
        ConfigError: it cannot be read or is not valid TOML (the parser's message gives the line).
    """
    return parse_toml(read_text(path), path)


def read_text(path: str) -> str:
    """The UTF-8 text of the file at ``path``.

    Raises:
        ConfigError: it cannot be read (the message names it and why).
    """
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from exc


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """Parse TOML ``text`` (``source`` names it in the message).

    Raises:
        ConfigError: not valid TOML (the parser's message gives the line).
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc


def _check(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings, got {value!r}")
        return tuple(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {type(value).__name__} {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {type(value).__name__} {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {type(value).__name__} {value!r}")
        return value
    raise TypeError(f"unsupported setting type {hint!r}")


def build(cls: type[T], *, file: dict[str, Any] | None = None, section: str = "", source: str = "",
          flags: dict[str, Any] | None = None) -> T:
    """Make ``cls`` from ``file[section]`` overridden by ``flags`` (None values in ``flags`` are unset).

    Args:
        cls: a dataclass whose fields are str, int, float, bool or tuple[str, ...].
        file: the parsed TOML document (or None).
        section: the table of ``file`` that configures ``cls``.
        source: the file's name, for messages.
        flags: values from the command line, by field name.

    Raises:
        ConfigError: an unknown key, a value of the wrong type, a missing required key, or a value the
            dataclass itself refuses.
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    where = f"{source}: [{section}]" if source else f"[{section}]"
    values = check_table(cls, (file or {}).get(section, {}), where)
    for key, value in (flags or {}).items():
        if key not in fields:
            raise ConfigError(f"unknown option --{key.replace('_', '-')}")
        if value is not None:
            values[key] = _check(value, hints[key], f"option --{key.replace('_', '-')}")
    for name in missing_keys(cls, values):
        raise ConfigError(f"{where} missing key {name!r} (or give --{name.replace('_', '-')})")
    return cls(**values)


def check_table(cls: type, table: Any, where: str) -> dict[str, Any]:
    """The values of ``table`` checked against the fields of the dataclass ``cls``.

    Raises:
        ConfigError: ``table`` is not a table, has a key that is not a field (with a suggestion) or a value
            of the wrong type; its ``key`` attribute names the key at fault ("" for the table itself).
    """
    if not isinstance(table, dict):
        raise _about(ConfigError(f"{where} must be a table"), "")
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in hints or key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f"; known keys: {', '.join(sorted(fields))}"
            raise _about(ConfigError(f"{where} unknown key {key!r}{hint}"), key)
        try:
            values[key] = _check(value, hints[key], f"{where} key {key!r}")
        except ConfigError as exc:
            raise _about(exc, key) from None
    return values


def missing_keys(cls: type, values: dict[str, Any]) -> list[str]:
    """The required fields of the dataclass ``cls`` that ``values`` lacks."""
    return [f.name for f in dataclasses.fields(cls)
            if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def _about(exc: ConfigError, key: str) -> ConfigError:
    exc.key = key  # type: ignore[attr-defined]
    return exc


def from_args(cls: type[T], section: str, args: Any) -> T:
    """Make ``cls`` from the ``[section]`` of the file named by ``args.config`` (if any) and the other
    attributes of ``args`` (an argparse namespace whose destinations are ``cls``'s field names).

    Raises:
        ConfigError: as :func:`read_toml` and :func:`build`.
    """
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    flags = {k: v for k, v in vars(args).items() if k in names}
    file = read_toml(args.config) if getattr(args, "config", None) else None
    return build(cls, file=file, section=section, source=getattr(args, "config", "") or "", flags=flags)
