"""datatools: efficient LLM training input pipelines, in layers (``docs/architecture.md``).

The kernels' public names are importable from here, loaded on first use (``import datatools`` stays fast).
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from datatools.base import numba_cache

numba_cache.configure()  # before numba compiles a kernel: a read-only install with an unwritable HOME still runs

try:
    __version__ = version("datatools-llm")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0"

_PUBLIC = {
    "BucketPlan": "datatools.kernels.bucket",
    "bucket_batch_sizes": "datatools.kernels.bucket",
    "bucket_batches": "datatools.kernels.bucket",
    "bucket_boundaries": "datatools.kernels.bucket",
    "padding_efficiency": "datatools.kernels.bucket",
    "ALGORITHMS": "datatools.kernels.packing",
    "PackPlan": "datatools.kernels.packing",
    "materialize": "datatools.kernels.packing",
    "pack_lengths": "datatools.kernels.packing",
    "BlockShuffle": "datatools.kernels.shuffle",
    "FeistelPermutation": "datatools.kernels.shuffle",
    "choose_context": "datatools.kernels.tiles",
    "chunk": "datatools.kernels.tiles",
    "fit_resolution": "datatools.kernels.tiles",
    "tile_align": "datatools.kernels.tiles",
}

__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str) -> Any:  # a lazily imported public name: any of their types
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'datatools' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
