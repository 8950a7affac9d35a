"""Validated configs: YAML (``yaml.safe_load``) into frozen, typed dataclasses.

Each config section is a dataclass whose type hints are the schema (``int``, finite ``float``, ``bool``,
``str``, ``Literal[...]`` or ``Annotated[str, OneOf(CHOICES)]``, ``X | None``, ``list[X]``, nested sections);
:func:`field` adds limits and a ``doc``; a section's ``RETIRED_KEYS`` (key -> what replaces it) are refused, saying
so. :func:`from_dict` raises one ``ValueError`` listing every problem, each naming the key path, the bad value and
what is allowed; :func:`schema_markdown` renders the key reference.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, overload

from datatools.base.checks import short_repr

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
D = TypeVar("D", bound="DataclassInstance")


@overload
def field(default: T, *, minimum: float | None = None, maximum: float | None = None, doc: str = "") -> T: ...


@overload
def field(
    *, default_factory: Callable[[], T], minimum: float | None = None, maximum: float | None = None, doc: str = ""
) -> T: ...


@overload
def field(*, minimum: float | None = None, maximum: float | None = None, doc: str = "") -> Any: ...  # required


def field(
    default: object = dataclasses.MISSING,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    doc: str = "",
    default_factory: Callable[[], object] | None = None,
) -> object:
    """A dataclass field with validation metadata: ``minimum`` and ``maximum`` (numbers, list items; the maximum
    is datatools' documented limit) and ``doc`` (the reference). Typed as :func:`dataclasses.field`: the default's
    type, the factory's, or (a required key) whatever the annotation says."""
    meta = {"minimum": minimum, "maximum": maximum, "doc": doc}
    if default_factory is None:
        return dataclasses.field(default=default, metadata=meta)
    if default is not dataclasses.MISSING:
        raise ValueError("cannot specify both default and default_factory")  # as dataclasses.field
    return dataclasses.field(default_factory=default_factory, metadata=meta)


class OneOf:
    """The allowed values of a ``str`` key, from the tuple the code's own checks use: ``Annotated[str,
    OneOf(ALGORITHMS)]`` is checked and documented as ``Literal[ALGORITHMS]`` (which a type checker cannot read)."""

    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = tuple(choices)

    def __repr__(self) -> str:
        return f"OneOf({self.choices!r})"


class Limits(NamedTuple):
    """A key's bounds from :func:`field`'s metadata (numbers; a list's items): None where unbounded."""

    minimum: float | None = None
    maximum: float | None = None


def _limits(f: dataclasses.Field[object]) -> Limits:
    """The bounds :func:`field` recorded on ``f`` (none for a plain dataclass field)."""
    return Limits(f.metadata.get("minimum"), f.metadata.get("maximum"))


def _choice_type(tp: object) -> object:
    """``tp`` with ``Annotated[str, OneOf(CHOICES)]`` read as ``Literal[CHOICES]``."""
    if typing.get_origin(tp) is typing.Annotated:
        base, *extras = typing.get_args(tp)
        one_of = next((e for e in extras if isinstance(e, OneOf)), None)
        return base if one_of is None else typing.Literal[one_of.choices]
    return tp


def _check_value(value: object, tp: object, key: str, limits: Limits) -> object:
    """``value`` checked against type hint ``tp`` (see the module docstring) and ``limits``, converted where the
    type says (an int given for a float); ValueError naming ``key`` (its path), the value and what is allowed."""
    tp = _choice_type(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if isinstance(value, bool) or value not in choices:
            raise ValueError(f"config: {key} must be one of {', '.join(map(repr, choices))}; got {short_repr(value)}")
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        last: ValueError | None = None
        for option in (o for o in options if o is not type(None)):
            try:
                return _check_value(value, option, key, limits)
            except ValueError as exc:
                last = exc
        raise last or ValueError(f"config: {key} takes no value; got {short_repr(value)}")  # a union of None alone
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"config: {key} must be a mapping of options; got {short_repr(value)}")
        return from_dict(tp, value, key)
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ValueError(f"config: {key} must be a list; got {short_repr(value)}")
        if len(value) > 4096:
            raise ValueError(f"config: {key} must hold at most 4096 items; got {len(value)}")
        return [_check_value(v, item, f"{key}[{i}]", limits) for i, v in enumerate(value)]
    if tp is bool:
        if not isinstance(value, bool):
            raise ValueError(f"config: {key} must be true or false; got {short_repr(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"config: {key} must be an integer; got {short_repr(value)}")
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"config: {key} must be a number; got {short_repr(value)}")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"config: {key} must be a finite number; got {value!r}")
    elif tp is str:
        if not isinstance(value, str):
            raise ValueError(f"config: {key} must be a string; got {short_repr(value)}")
    minimum, maximum = limits
    if minimum is not None and isinstance(value, (int, float)) and value < minimum:
        raise ValueError(f"config: {key} must be >= {minimum}; got {short_repr(value)}")
    if maximum is not None and isinstance(value, (int, float)) and value > maximum:
        raise ValueError(f"config: {key} must be <= {maximum:,} (datatools' limit); got {short_repr(value)}")
    return value


def from_dict(cls: type[D], data: object, where: str = "") -> D:
    """Build dataclass ``cls`` from ``data``, validating every key and value; one ``ValueError`` lists every
    problem found (see the module docstring). ``data``: the parsed YAML of the section (None: empty)."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ValueError(f"config: {where or 'the top level'} must be a mapping; got {short_repr(data)}")
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    retired = getattr(cls, "RETIRED_KEYS", {})  # key -> what replaces it
    problems: list[str] = [f"{key} was removed: {retired[key]}" for key in data if key in retired]
    unknown = [key for key in data if key not in fields and key not in retired]
    if unknown:
        section = f"in {where}" if where else "at the top level"
        names = ", ".join(short_repr(k, 30) for k in unknown[:5]) + (
            f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else ""
        )
        problems.append(
            f"unknown key{'s' if len(unknown) > 1 else ''} {names} {section} (allowed: {', '.join(fields)})"
        )
    values: dict[str, object] = {}
    for name, f in fields.items():
        key = f"{where}.{name}" if where else name
        if name in data:
            try:
                values[name] = _check_value(data[name], hints[name], key, _limits(f))
            except ValueError as exc:
                problems.append(str(exc).removeprefix("config: "))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            problems.append(f"missing required key {key!r}")
    if problems:
        shown = problems[:8] + ([f"{len(problems) - 8} more problems"] if len(problems) > 8 else [])
        raise ValueError("config: " + "; ".join(shown))
    obj = cls(**values)
    check = getattr(obj, "check", None)
    if check is not None:
        check(where)
    return obj


def _type_text(tp: object) -> str:
    """The reference's text of type hint ``tp``: ``integer``, ``a / b`` (choices), ``list of string``, ..."""
    tp = _choice_type(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " / ".join(map(str, typing.get_args(tp)))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(t) for t in typing.get_args(tp) if t is not type(None)) + " or null"
    if origin is list:
        return f"list of {_type_text(typing.get_args(tp)[0])}"
    if dataclasses.is_dataclass(tp):
        return "section"
    names: dict[object, str] = {int: "integer", float: "number", bool: "true / false", str: "string"}
    return names.get(tp, str(tp))


def _default_text(f: dataclasses.Field[object]) -> str:
    """The reference's text of a key's default: ``required``, ``(section)``, ``null``, ``true``, the value."""
    if f.default_factory is not dataclasses.MISSING:
        return "(section)"
    if f.default is dataclasses.MISSING:
        return "required"
    return "null" if f.default is None else str(f.default).lower() if isinstance(f.default, bool) else str(f.default)


def schema_markdown(cls: type[DataclassInstance], where: str = "") -> list[str]:
    """Table rows (markdown) documenting every key of ``cls`` and its sections: key, type or choices, default,
    minimum and doc."""
    rows = []
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        key = f"{where}.{f.name}" if where else f.name
        tp = hints[f.name]
        section = next(
            (t for t in (tp, *typing.get_args(tp)) if isinstance(t, type) and dataclasses.is_dataclass(t)), None
        )
        minimum = f.metadata.get("minimum")
        doc = f.metadata.get("doc", "")
        items = next(
            (
                typing.get_args(t)[0]
                for t in (tp, *typing.get_args(tp))
                if typing.get_origin(t) is list and dataclasses.is_dataclass(typing.get_args(t)[0])
            ),
            None,
        )
        table = items if items is not None else section
        if table is not None:  # a list of sections: its items' keys as key[].name
            kind = "list of sections" if items is not None else "section"
            rows.append(f"| `{key}` | {kind}{' (optional)' if f.default is None else ''} | | | {doc} |")
            rows.extend(schema_markdown(table, f"{key}[]" if items is not None else key))
            continue
        maximum = f.metadata.get("maximum")
        bounds = " and ".join(
            x for x in ("" if minimum is None else f">= {minimum}", "" if maximum is None else f"<= {maximum:,}") if x
        )
        rows.append(f"| `{key}` | {_type_text(tp)} | {_default_text(f)} | {bounds} | {doc} |")
    return rows
