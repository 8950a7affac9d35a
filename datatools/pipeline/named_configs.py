"""Configs by name and ``--set key=value`` overrides, so the shipped configs work after ``pip install``.

:func:`resolve_config` finds a packaged config (``datatools/configs/``) by name (``pretrain_block_8192``, with
or without ``.yaml`` or ``configs/``) when no such file exists; a file always wins. :func:`apply_overrides` sets
dotted keys (``packing.ctx=2048``) to YAML scalars or flat lists, validated with the file.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from datatools.io import storage
from datatools.io.storage.paths import first_line

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_VALUE_CHARS = 4096


def _configs_dir() -> resources.abc.Traversable:
    return resources.files("datatools").joinpath("configs")


def packaged_configs() -> list[str]:
    """Names of the configs shipped in the package (``datatools/configs/*.yaml``), sorted."""
    return sorted(p.name.removesuffix(".yaml") for p in _configs_dir().iterdir() if p.name.endswith(".yaml"))


def resolve_config(config: str | os.PathLike[str]) -> str | os.PathLike[str]:
    """``config`` itself when it is a file (or a URL), else the packaged config it names.

    Raises:
      ValueError: neither a file nor a packaged config; the message lists the packaged names.
    """
    text = os.fspath(config)
    if not storage.location(text).has_directories or os.path.exists(text):  # a URL names no packaged config
        return config
    name = text.removeprefix("configs/").removeprefix("configs" + os.sep)
    name = name[: -len(".yaml")] if name.endswith(".yaml") else name[: -len(".yml")] if name.endswith(".yml") else name
    if name and "/" not in name and os.sep not in name:
        candidate = _configs_dir().joinpath(f"{name}.yaml")
        if candidate.is_file():
            return Path(str(candidate))
    raise ValueError(
        f"{text}: no such config file, and no packaged config of that name (packaged: {', '.join(packaged_configs())})"
    )


DEMO_DATA = "demo_data/"  # where the packaged configs read (what `make demo` builds in a checkout)


def check_demo_data(config: str | os.PathLike[str], sources: Sequence[str]) -> None:
    """When ``config`` names a packaged config (no such file here) and one of its ``sources`` (paths) under
    :data:`DEMO_DATA`, relative to the working directory, is missing (after ``pip install`` it is):
    FileNotFoundError naming it, with the hint to name the data with ``--source``."""
    if resolve_config(config) is config:
        return  # a file (or URL) of the user's: its paths are the user's
    for path in sources:
        if path.startswith(DEMO_DATA) and not os.path.exists(path):
            hint = "copy the config and edit its sources' paths" if len(sources) > 1 else "name your data with --source"
            raise FileNotFoundError(
                errno.ENOENT,
                f"no such file or directory: the shipped config {config} reads datatools' demo data; {hint} "
                f"(or build the demo here: make demo, in a checkout)",
                path,
            )


def parse_value(key: str, text: str) -> Any:  # a YAML scalar or a flat list of them
    """A ``--set`` value: a YAML scalar or a flat list of scalars (nothing nested: no alias can expand)."""
    if len(text) > MAX_VALUE_CHARS:
        raise ValueError(f"--set {key}: the value is {len(text):,} characters; at most {MAX_VALUE_CHARS:,}")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ValueError(f"--set {key}={text[:60]!r}: not a YAML value ({first_line(exc)})") from None
    if node is None:
        return None
    flat = isinstance(node, yaml.SequenceNode) and all(isinstance(n, yaml.ScalarNode) for n in node.value)
    if not (isinstance(node, yaml.ScalarNode) or flat):
        raise ValueError(f"--set {key}={text[:60]!r}: a value must be a scalar or a flat list like [1, 2]")
    return yaml.safe_load(text)


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``data`` (a loaded config) with each ``KEY=VALUE`` of ``overrides`` applied in order (a new dict; the
    sections on the way are copied). Raises ValueError naming a malformed override."""
    out = dict(data)
    for item in overrides:
        key, eq, text = str(item).partition("=")
        key = key.strip()
        if not eq or not _KEY.fullmatch(key):
            raise ValueError(f"--set {str(item)[:80]!r}: expected KEY=VALUE with a dotted key, like packing.ctx=2048")
        value = parse_value(key, text.strip())
        parts = key.split(".")
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = {}
            elif not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ValueError(f"--set {key}: {where} is {child!r}, not a section")
            node[part] = child = dict(child)
            node = child
        node[parts[-1]] = value
    return out
