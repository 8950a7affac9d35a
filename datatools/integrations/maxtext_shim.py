"""Shim: the one MaxText function datatools replaces for a ``with`` block (MaxText has no data-source hook).

What it assumes of MaxText (:data:`TESTED_MAXTEXT`, the version ``make test-clients`` tests): the module path,
name and parameters ``(config, mesh)`` of :data:`MAXTEXT_FACTORY`, each checked at the swap; a MaxText that
differs raises :class:`~datatools.base.errors.UnsupportedVersion` naming what differs.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from datatools.base.errors import UnsupportedVersion

TESTED_MAXTEXT = "0.2.5"  # the MaxText version the shim was checked against (Makefile: MAXTEXT_VERSION)
MAXTEXT_FACTORY = ("maxtext.input_pipeline.input_pipeline_interface", "create_data_iterator", ("config", "mesh"))


def _parameters(function: Callable) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # a builtin without a signature
        return ()


@contextmanager
def swapped_function(
    module_name: str, name: str, replacement: Callable, parameters: Sequence[str]
) -> Iterator[Callable]:
    """Within the block, ``module_name.name`` is ``replacement``; the original is put back on exit (an exception
    included) and yielded, so the replacement may call it.

    Raises:
      UnsupportedVersion: the module has no such function, or its parameter names are not ``parameters``.
    """
    module = importlib.import_module(module_name)
    original = getattr(module, name, None)
    if not callable(original):
        raise UnsupportedVersion(
            f"MaxText: {module_name} has no function {name} (datatools' shim, "
            f"datatools/integrations/maxtext_shim.py, replaces it to feed the trainer)"
        )
    have = _parameters(original)
    if have != tuple(parameters):
        raise UnsupportedVersion(
            f"MaxText: {module_name}.{name} takes ({', '.join(have)}), not "
            f"({', '.join(parameters)}) as datatools' shim (datatools/integrations/"
            f"maxtext_shim.py) expects"
        )
    setattr(module, name, replacement)
    try:
        yield original
    finally:
        setattr(module, name, original)


@contextmanager
def maxtext_data_iterator(replacement: Callable) -> Iterator[Callable]:
    """Within the block, MaxText's trainers build their data iterators with ``replacement(config, mesh)``."""
    module_name, name, parameters = MAXTEXT_FACTORY
    with swapped_function(module_name, name, replacement, parameters) as original:
        yield original
