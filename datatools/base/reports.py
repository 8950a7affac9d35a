"""Typed reports: each command's report is a dataclass; its JSON (``--json``, :meth:`Report.to_json`) has the
dataclass's field names as keys, in order.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, cast

import numpy as np


def as_json_value(value: Any) -> Any:
    """``value`` as plain JSON types: dataclasses and mappings -> dict (keys as str), tuples/lists/sets/arrays ->
    list, numpy scalars -> int/float/bool; TypeError (naming its type) for a value JSON cannot hold."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): as_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json_value(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [as_json_value(v) for v in sorted(value)]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"a report field holds a {type(value).__name__}, which JSON cannot represent")


class Report:
    """Mixin of the report dataclasses: :meth:`as_dict` (JSON types) and :meth:`to_json` (text)."""

    def as_dict(self) -> dict[str, Any]:
        """Every field, recursively, as JSON-ready types (see :func:`as_json_value`)."""
        return cast(dict[str, Any], as_json_value(self))  # a dataclass's value is a dict

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text (NaN written as JSON's ``NaN``, as Python's json module does)."""
        return json.dumps(self.as_dict(), indent=indent)
