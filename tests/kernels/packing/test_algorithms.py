"""The table of packing algorithms is the one place that knows an algorithm's traits; PackOptions validates once."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import datatools
from datatools.kernels.packing import ALGORITHMS, TABLE, PackOptions, count_rows, count_rows_chunked, pack_lengths


def test_table_rows():
    """Names are the table's, unique; every in-order packer counts by chunks, the decreasing ones by histogram."""
    assert ALGORITHMS == tuple(a.name for a in TABLE)
    assert len(set(ALGORITHMS)) == len(ALGORITHMS)
    for a in TABLE:
        assert (a.count_chunks is None) == a.decreasing
        assert (a.place is None) == a.cuts_documents
        assert a.mode == ("planned" if a.decreasing else "streaming")


def test_no_name_tests_outside_the_table():
    """No module tests an algorithm's name for a trait (``*_decreasing``, ``first_fit*``): they read the table."""
    pattern = re.compile(r"""(endswith|startswith)\(\s*["'](_decreasing|first_fit|best_fit|next_fit|concat)""")
    root = Path(datatools.__file__).parent
    found = [str(p.relative_to(root)) for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert found == []


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(ctx=0), "ctx"),
        (dict(ctx=10, align=3), "align must divide ctx"),
        (dict(ctx=8, algorithm="worst_fit"), "algorithm"),
        (dict(ctx=8, overflow="wrap"), "overflow"),
        (dict(ctx=8, max_segments=0), "max_segments"),
        (dict(ctx=8, window=0), "window"),
    ],
)
def test_options_validated_once(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PackOptions(**kwargs)


def test_concat_split_counted_by_chunks_as_whole():
    """concat_split is one kernel: its state carried over chunks gives the plan's rows, pieces and cut documents."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 40, 300)
    plan = pack_lengths(lengths, 32, algorithm="concat_split", max_segments=3)
    whole = count_rows(32, "concat_split", lengths=lengths, max_segments=3)
    chunked = count_rows_chunked(32, "concat_split", np.array_split(lengths, 7), max_segments=3)
    assert whole == chunked
    assert (whole.rows, whole.pieces, whole.max_pieces_per_row) == (
        plan.num_rows,
        plan.num_pieces,
        int(plan.pieces_per_row.max()),
    )
