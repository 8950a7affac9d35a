"""datatools: efficient LLM training input pipelines.

Kernels (numpy/numba, no Grain or JAX): packing (:mod:`datatools.pack`),
shuffling (:mod:`datatools.shuffle`), bucketing (:mod:`datatools.bucket`),
tile-aligned contexts (:mod:`datatools.tiles`).
"""

from importlib.metadata import PackageNotFoundError, version

from datatools.bucket import (
    BucketPlan,
    bucket_batch_sizes,
    bucket_batches,
    bucket_boundaries,
    padding_efficiency,
)
from datatools.pack import ALGORITHMS, PackPlan, materialize, pack_lengths
from datatools.shuffle import BlockShuffle, FeistelPermutation
from datatools.tiles import choose_context, chunk, fit_resolution, tile_align

try:
    __version__ = version("datatools")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0"

__all__ = [
    "ALGORITHMS",
    "BlockShuffle",
    "BucketPlan",
    "FeistelPermutation",
    "PackPlan",
    "bucket_batch_sizes",
    "bucket_batches",
    "bucket_boundaries",
    "choose_context",
    "chunk",
    "fit_resolution",
    "materialize",
    "pack_lengths",
    "padding_efficiency",
    "tile_align",
    "__version__",
]
