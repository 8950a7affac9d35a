"""YAML config files read safely: ``yaml.SafeLoader`` with limits on size, expanded size and nesting, and no
duplicate keys. Nodes are counted as often as aliases repeat them (memoized) and refused past
:data:`MAX_EXPANDED_NODES` before anything is constructed (the "billion laughs" alias bomb). A key written twice in
one mapping is refused (PyYAML would keep the last); keys brought in by a merge (``<<: *defaults``) may be overridden.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from datatools.base.checks import short_repr

MAX_CONFIG_BYTES = 1 << 20  # a config file is a page of YAML, not a data set
MAX_EXPANDED_NODES = 100_000  # nodes once aliases are expanded: 100x a long config, 1/3870 of a 9x9 alias bomb
MAX_DEPTH = 32  # nesting of mappings and lists, aliases expanded
MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.YAMLError):  # type: ignore[misc]  # PyYAML ships no type information: its classes are Any
    """A config refused for what it holds, not for its syntax: the message says it all."""


class _LimitedLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type information: its classes are Any
    """``yaml.SafeLoader`` with the limits and the unique keys of the module docstring."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.YAMLError(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        _check_expanded(node)
        return node

    def compose_mapping_node(self, anchor: str | None) -> yaml.MappingNode:
        node = super().compose_mapping_node(anchor)
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue  # merged keys may be overridden; a complex key is PyYAML's to refuse (unhashable)
            key = self.construct_object(key_node)  # a scalar: 1 and 0x1 are the same key
            if key in seen:
                raise _Refused(
                    f"duplicate key {short_repr(key)} (line {key_node.start_mark.line + 1}): a key may appear "
                    f"once per mapping"
                )
            seen.add(key)
        return node


def _check_expanded(root: yaml.Node | None) -> None:
    """Refuse a document whose nodes, aliases expanded, number more than :data:`MAX_EXPANDED_NODES` or nest
    deeper than :data:`MAX_DEPTH` (memoized per distinct node; a node that holds itself is refused)."""
    if root is None:
        return
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)
    active: set[int] = set()

    def measure(node: yaml.Node) -> tuple[int, int]:
        key = id(node)
        if key in done:
            return done[key]
        if key in active:
            raise _Refused("an alias inside its own anchor (a structure that holds itself)")
        active.add(key)
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        size, depth = 1, 0
        for child in children:
            n, d = measure(child)
            size, depth = size + n, max(depth, d)
            if size > MAX_EXPANDED_NODES:
                raise _Refused(
                    f"expands to more than {MAX_EXPANDED_NODES:,} values through its aliases (an alias bomb?)"
                )
        if depth + 1 > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels once its aliases are expanded")
        active.discard(key)
        done[key] = (size, depth + 1)
        return done[key]

    measure(root)


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping in a YAML file (safe, limits on size, expanded size and depth, unique keys); ValueError naming
    the file otherwise. ``path`` may be an ``s3://`` / ``gs://`` URL (read through :mod:`datatools.io.storage`)."""
    from datatools.io import storage
    from datatools.io.storage.paths import first_line

    path = storage.location(path).path
    if not storage.location(path).is_file():
        raise ValueError(f"{path}: config file not found")
    try:
        raw = storage.location(path).read_bytes(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ValueError(f"{path}: a config file must be at most {MAX_CONFIG_BYTES:,} bytes")
        data = yaml.load(raw.decode("utf-8"), Loader=_LimitedLoader)  # noqa: S506 (a SafeLoader subclass)
    except _Refused as exc:
        raise ValueError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: invalid YAML ({short_repr(first_line(exc), 120)})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except RecursionError:
        raise ValueError(f"{path}: invalid YAML (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config must be a YAML mapping, got {type(data).__name__}")
    return data
