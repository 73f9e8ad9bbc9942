"""Settings from a TOML file plus command-line flags, checked against a config dataclass.

Every key of a section must be a field of the dataclass it configures and have that field's type; a
required field must come from the file or a flag. Anything else is an error that names the file, the
section and the key, never a silent default (the original's loader skipped every key after the first
missing one).

A process's command line is made from its config dataclass (:func:`parser_for`): one flag per field
(``--field-name``, or the field's ``metadata["flag"]``), its help taken from the class docstring's
``Attributes:`` section. :func:`to_args` is the inverse: the flags that rebuild a given config, which is how
a host manager starts its children from their settings objects.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import tomllib
import typing
from typing import Any, TypeVar

from roq.errors import ConfigError

__all__ = ["parse_rate", "read_toml", "read_text", "parse_toml", "build", "from_args", "check_table", "missing_keys",
           "parser_for", "add_options", "to_args", "field_docs", "flag_of", "parse_assignments"]

T = TypeVar("T")


_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)?$", re.IGNORECASE)
_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "bps": 1, "kbps": 1e3, "mbps": 1e6,
          "gbps": 1e9}


def parse_rate(text: str) -> float:
    """Bytes/s of a rate as ``tc`` writes it: ``100mbit`` (bits/s), ``12mbps`` (bytes/s), a plain number of bits/s.

    Raises:
        ConfigError: not a rate, or not above 8 kbit/s.
    """
    match = _RATE.match(text.strip())
    if not match:
        raise ConfigError(f"bandwidth {text!r} is not a rate such as 100mbit, 1gbit or 12mbps")
    rate = float(match.group(1)) * _UNITS[(match.group(2) or "bit").lower()]
    if rate < 1000:
        raise ConfigError(f"bandwidth {text!r} is below 8kbit")
    return rate


def parse_duration(text: str) -> float:
    """A duration such as ``90s``, ``30m``, ``12h`` or ``7d``, in seconds.

    Raises:
        ConfigError: not of that form.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text or "")
    if not match:
        raise ConfigError(f"a duration must look like 90s, 30m, 12h or 7d, got {text!r}")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


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
        item = typing.get_args(hint)[0]
        if item is float and isinstance(value, (list, tuple)):
            return tuple(_check(v, float, f"{where} values") for v in value)
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


# ---------------------------------------------------------------------- command lines from dataclasses


def flag_of(field: dataclasses.Field) -> str:
    """The command-line flag of a config field: ``metadata["flag"]`` or ``--field-name``."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def field_docs(cls: type) -> dict[str, str]:
    """Each field's description from the ``Attributes:`` section of ``cls``'s docstring (Google style;
    ``a, b: text`` documents both)."""
    doc = cls.__doc__ or ""
    docs: dict[str, str] = {}
    section = re.split(r"\n\s*Attributes:\s*\n", doc, maxsplit=1)
    if len(section) < 2:
        return docs
    names: list[str] = []
    indent = None
    for line in section[1].splitlines():
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent:
            break
        entry = re.match(r"^\s*([a-z_][a-z0-9_]*(?:\s*,\s*[a-z_][a-z0-9_]*)*):\s*(.*)$", line)
        if width == indent and entry:
            names = [n.strip() for n in entry.group(1).split(",")]
            for name in names:
                docs[name] = entry.group(2).strip()
        elif names:
            for name in names:
                docs[name] = f"{docs[name]} {line.strip()}".strip()
    return docs


def add_options(parser: argparse.ArgumentParser, cls: type, *, skip: tuple[str, ...] = ()) -> None:
    """Add one flag per field of the config dataclass ``cls`` (default None: the file or the field's
    default applies; see :func:`from_args`)."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        hint = hints[f.name]
        text = docs.get(f.name, "").replace("%", "%%")
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required:
            text += " (required, here or in the file)"
        elif hint is not bool and typing.get_origin(hint) is not tuple and f.default not in ("", None):
            text += f" (default {f.default})".replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": f.name, "default": None, "help": text.strip() or None}
        if hint is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
            kwargs["help"] = f"{text} (default {'on' if f.default else 'off'})".strip()
        elif typing.get_origin(hint) is tuple:
            kwargs["action"] = "append"
            kwargs["metavar"] = "VALUE"
        elif hint in (int, float, str):
            kwargs["type"] = hint
            kwargs["metavar"] = {int: "N", float: "X", str: "TEXT"}[hint]
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: no command-line form for {hint!r}")
        parser.add_argument(flag_of(f), **kwargs)


def parser_for(cls: type, *, prog: str, description: str, section: str) -> argparse.ArgumentParser:
    """The command line of a process configured by ``cls``: ``--config FILE`` (its ``[section]`` table),
    ``--log-level`` and one flag per field."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--config", help=f"TOML file with a [{section}] table; flags override it")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING... (default INFO)")
    add_options(p, cls)
    return p


def to_args(config: Any) -> list[str]:
    """The flags that give ``config`` back through :func:`parser_for` and :func:`from_args` (fields left at
    their default are not written)."""
    hints = typing.get_type_hints(type(config))
    out: list[str] = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        if f.default_factory is not dataclasses.MISSING and value == f.default_factory():
            continue
        flag = flag_of(f)
        if hints[f.name] is bool:
            out.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, tuple):
            out.extend(f"{flag}={item}" for item in value)
        else:
            out.append(f"{flag}={value!r}" if isinstance(value, float) else f"{flag}={value}")
    return out


def parse_assignments(cls: type, pairs: tuple[str, ...] | list[str], where: str) -> dict[str, Any]:
    """``KEY=VALUE`` strings (values in TOML syntax: ``backend_hwm=100``, ``zk="h:1"``, bare words are
    text) as values for fields of the config dataclass ``cls``, checked like a file's table.

    Raises:
        ConfigError: not KEY=VALUE, an unknown key, or a value of the wrong type (named with ``where``).
    """
    table: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"{where}: expected KEY=VALUE, got {pair!r}")
        try:
            table[key] = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            table[key] = value.strip()
    return check_table(cls, table, where)
