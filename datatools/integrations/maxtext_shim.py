"""Shim: the one MaxText function datatools replaces for a ``with`` block (MaxText has no data-source hook). Its
module, name and parameters (:data:`MAXTEXT_FACTORY`, as in MaxText :data:`TESTED_MAXTEXT`) are checked at the swap.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from datatools.base.errors import UnsupportedVersion

TESTED_MAXTEXT = "0.2.5"  # the MaxText version the shim was checked against (Makefile: MAXTEXT_VERSION)
MAXTEXT_FACTORY = ("maxtext.input_pipeline.input_pipeline_interface", "create_data_iterator", ("config", "mesh"))


def _parameters(function: Callable[..., Any]) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # a builtin without a signature
        return ()


@contextmanager
def swapped_function(
    module_name: str, name: str, replacement: Callable[..., Any], parameters: Sequence[str]
) -> Iterator[Callable[..., Any]]:
    """Within the block, ``module_name.name`` is ``replacement``; the original is yielded and put back on exit.
    :class:`~datatools.base.errors.UnsupportedVersion` when there is no such function or its parameters differ."""
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


def maxtext_data_iterator(replacement: Callable[..., Any]) -> AbstractContextManager[Callable[..., Any]]:
    """Within the block, MaxText's trainers build their data iterators with ``replacement(config, mesh)``."""
    module_name, name, parameters = MAXTEXT_FACTORY
    return swapped_function(module_name, name, replacement, parameters)
