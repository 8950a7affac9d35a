"""The packing engine: plans (which document pieces share a row), the rows built from them, and row counts::

from datatools.kernels.packing import pack_lengths, PackPlan, materialize, count_rows
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
