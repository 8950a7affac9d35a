"""datatools: efficient LLM training input pipelines.

Kernels (numpy/numba, no Grain or JAX): packing (:mod:`datatools.pack`),
shuffling (:mod:`datatools.shuffle`).
"""

from importlib.metadata import PackageNotFoundError, version

from datatools.pack import ALGORITHMS, PackPlan, materialize, pack_lengths
from datatools.shuffle import BlockShuffle, FeistelPermutation

try:
    __version__ = version("datatools")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0"

__all__ = [
    "ALGORITHMS",
    "BlockShuffle",
    "FeistelPermutation",
    "PackPlan",
    "materialize",
    "pack_lengths",
    "__version__",
]
