"""Validated configs: YAML (``yaml.safe_load``) into frozen dataclasses.

Each config section is a dataclass; a field's metadata can give ``choices`` and a
``minimum``. :func:`from_dict` checks every key and value and raises one
``ValueError`` naming the key path, the bad value and what is allowed, e.g.
``config: shuffle.kind must be one of 'none', 'full', 'block'; got 'blok'``.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from pathlib import Path

import yaml


def field(default=dataclasses.MISSING, *, choices=None, minimum=None, doc: str = "", default_factory=dataclasses.MISSING):
    """A dataclass field with validation metadata."""
    meta = {"choices": choices, "minimum": minimum, "doc": doc}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _type_name(t) -> str:
    return getattr(t, "__name__", str(t))


def _check_value(value, tp, key: str, meta: dict):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        last = None
        for option in options:
            if option is type(None):
                continue
            try:
                return _check_value(value, option, key, meta)
            except ValueError as exc:
                last = exc
        raise last
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"config: {key} must be a mapping of options; got {value!r}")
        return from_dict(tp, value, key)
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ValueError(f"config: {key} must be a list; got {value!r}")
        return [_check_value(v, item, f"{key}[{i}]", {"minimum": meta.get("minimum")}) for i, v in enumerate(value)]
    if tp is bool:
        if not isinstance(value, bool):
            raise ValueError(f"config: {key} must be true or false; got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"config: {key} must be an integer; got {value!r}")
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"config: {key} must be a number; got {value!r}")
        value = float(value)
    elif tp is str:
        if not isinstance(value, str):
            raise ValueError(f"config: {key} must be a string; got {value!r}")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ValueError(f"config: {key} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    minimum = meta.get("minimum")
    if minimum is not None and isinstance(value, (int, float)) and value < minimum:
        raise ValueError(f"config: {key} must be >= {minimum}; got {value!r}")
    return value


def from_dict(cls, data: dict | None, where: str = ""):
    """Build dataclass ``cls`` from ``data``, validating every key and value (see the module docstring)."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ValueError(f"config: {where or 'the top level'} must be a mapping; got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            section = f"in {where}" if where else "at the top level"
            raise ValueError(f"config: unknown key {key!r} {section} (allowed: {', '.join(fields)})")
    values = {}
    for name, f in fields.items():
        key = f"{where}.{name}" if where else name
        if name in data:
            values[name] = _check_value(data[name], hints[name], key, dict(f.metadata))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"config: missing required key {key!r}")
    obj = cls(**values)
    check = getattr(obj, "check", None)
    if check is not None:
        check(where)
    return obj


def to_dict(obj) -> dict:
    """A config dataclass back to plain data (for JSON reports and YAML snippets)."""
    return dataclasses.asdict(obj)


def load_yaml(path: str | os.PathLike) -> dict:
    """The mapping in a YAML file (safe_load); ValueError naming the file when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: config file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path}: invalid YAML ({first})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config must be a YAML mapping, got {type(data).__name__}")
    return data
