"""YAML config files read safely: ``yaml.SafeLoader`` with limits on size, aliases and nesting."""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


MAX_CONFIG_BYTES = 1 << 20  # a config file is a page of YAML, not a data set
MAX_ALIASES = 100  # YAML aliases (*name) in one file: enough for sharing sections, too few for an alias bomb
MAX_DEPTH = 32  # nesting of mappings and lists


class _LimitedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with limits on aliases and nesting, so that a few hundred bytes cannot expand into
    gigabytes (the "billion laughs" alias bomb) or recurse without end."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_ALIASES} aliases (an alias bomb?)")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.YAMLError(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(path: str | os.PathLike) -> dict:
    """The mapping in a YAML file (safe, with size, alias and depth limits); ValueError naming the file otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: config file not found")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ValueError(f"{path}: a config file must be at most {MAX_CONFIG_BYTES:,} bytes")
        data = yaml.load(raw.decode("utf-8"), Loader=_LimitedLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: invalid YAML ({_short(first, 120)})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except RecursionError:
        raise ValueError(f"{path}: invalid YAML (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config must be a YAML mapping, got {type(data).__name__}")
    return data
