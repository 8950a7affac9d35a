"""The packing engine: plans (which document pieces share a row), the rows built from them, and row counts.

Public API (import from here)::

    from datatools.kernels.packing import pack_lengths, PackPlan, materialize, count_rows

Modules, from the bottom up:

* :mod:`~datatools.kernels.packing.trees`: the search trees (max segment tree, presence tree, row stacks).
* :mod:`~datatools.kernels.packing.pieces`: overflow policies (:func:`cut_pieces`), piece sizes and
  histograms, the decreasing order.
* :mod:`~datatools.kernels.packing.algorithms`: the table of algorithms (:data:`TABLE`: kernel and traits of
  each) and :class:`PackOptions` (one packing's options, validated once).
* :mod:`~datatools.kernels.packing.planners`: the packers (next, first, best fit, windowed or not, in bulk on
  runs of equal pieces; the capped dealing; concat-split), each writing rows or only counting them.
* :mod:`~datatools.kernels.packing.plan`: :func:`pack_lengths` -> :class:`PackPlan`.
* :mod:`~datatools.kernels.packing.counting`: :func:`count_rows` -> :class:`PackCount` (the same kernels, no
  plan: what the padding analyzer reports).
* :mod:`~datatools.kernels.packing.materialize`: :func:`materialize`, :func:`materialize_pieces`.
* :mod:`~datatools.kernels.packing.groups`: :func:`pack_in_groups` (bounded memory), :func:`lower_bound_rows`.
* :mod:`~datatools.kernels.packing.plan_format`: the compact encoding of a plan on disk, :func:`gather_rows`.
"""

from datatools.kernels.packing.algorithms import ALGORITHMS, TABLE, Algorithm, PackOptions
from datatools.kernels.packing.counting import PackCount, count_rows, count_rows_chunked, count_windows
from datatools.kernels.packing.groups import lower_bound_rows, pack_in_groups, size_histogram
from datatools.kernels.packing.materialize import check_token_ids, materialize, materialize_pieces
from datatools.kernels.packing.pieces import cut_pieces, piece_histogram, piece_sizes
from datatools.kernels.packing.plan import PackPlan, pack, pack_lengths
from datatools.kernels.packing.plan_format import lengths_identity

__all__ = [
    "ALGORITHMS",
    "TABLE",
    "Algorithm",
    "PackCount",
    "PackOptions",
    "PackPlan",
    "check_token_ids",
    "count_rows",
    "count_rows_chunked",
    "count_windows",
    "cut_pieces",
    "lengths_identity",
    "lower_bound_rows",
    "materialize",
    "materialize_pieces",
    "pack",
    "pack_in_groups",
    "pack_lengths",
    "piece_histogram",
    "piece_sizes",
    "size_histogram",
]
