"""The weighted interleave: quotas are monotone, one draw per position, every prefix within K documents of the
weights, and segments (weight changes, exhausted sources) continue each source's draws without a gap."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.kernels.mixture import Segment, draw, exhaust_segments, quotas, split_ratios

weights = st.lists(st.floats(0.01, 100.0), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(w=weights, n=st.integers(1, 3000), offset=st.integers(0, 1 << 16))
def test_each_position_draws_once_and_every_prefix_holds_the_weights(w, n, offset):
    seg = Segment(0, np.zeros(len(w), np.int64), split_ratios(w), offset)
    q = seg.quota(np.arange(n + 1))
    assert np.array_equal(q.sum(axis=1), np.arange(n + 1))  # every position draws from exactly one source
    assert np.all(np.diff(q, axis=0) >= 0)  # quotas never go back
    p = np.asarray(w) / np.sum(w)
    assert np.all(np.abs(q - np.arange(n + 1)[:, None] * p) <= len(w) + 1)  # the stated bound: about K documents
    source, rank = draw([seg], np.arange(n))
    for k in range(len(w)):  # a source's draws are numbered 0, 1, 2, ... in position order
        assert np.array_equal(rank[source == k], np.arange(np.count_nonzero(source == k)))


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=5), data=st.data())
def test_exhaust_draws_every_document_of_every_source_exactly_once(sizes, data):
    if sum(sizes) == 0:
        return
    w = data.draw(st.lists(st.floats(0.01, 10.0), min_size=len(sizes), max_size=len(sizes)))
    switch_at = data.draw(st.integers(0, sum(sizes)))
    w2 = data.draw(st.lists(st.floats(0.01, 10.0), min_size=len(sizes), max_size=len(sizes)))
    switches = [(0, np.asarray(w))] + ([(switch_at, np.asarray(w2))] if 0 < switch_at < sum(sizes) else [])
    segs = exhaust_segments(np.asarray(sizes), switches, lambda start: start % 97)
    source, rank = draw(segs, np.arange(sum(sizes)))
    for k, n in enumerate(sizes):
        assert np.array_equal(np.sort(rank[source == k]), np.arange(n)), f"source {k}"


def test_quotas_are_exact_for_large_positions():
    r = split_ratios([0.3, 0.7])
    h = np.array([(1 << 40) + 12345])
    q = quotas(r, h)
    assert q.sum() == h[0] and abs(q[0, 0] - 0.3 * h[0]) <= 1
