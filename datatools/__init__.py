"""datatools: efficient LLM training input pipelines.

The package is organised in layers, each a folder (see ``docs/architecture.md``):
``kernels`` (numpy/numba: packing, bucketing, shuffling, tiles, batch layouts) ->
``io`` (inputs, tokenizer, token store, document sources) -> ``jobs`` (pre-tokenize)
-> ``analysis`` (padding, shuffle quality) -> ``grain`` (transforms) -> ``pipeline``
(configs, build, run) -> ``train`` (JAX, the ``jax`` extra) -> ``cli``.

The kernels' public names are importable from here; they are loaded on first use, so
``import datatools`` (and ``datatools --version``) stays fast.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

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


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'datatools' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
