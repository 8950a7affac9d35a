"""Dataset decomposition and the curriculum order, by properties: every token in exactly one piece, no piece
crossing a document, batches of one length, every batch drawn once per epoch, short first under grow_p2."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.kernels.curriculum import curriculum_order, curriculum_rows, decompose, grow_p2_odds

SIZE_SETS = [[4], [4, 8], [4, 8, 16, 32], [8, 24, 40], [16, 32, 64, 128]]

lengths_st = st.lists(st.integers(0, 300), min_size=1, max_size=120)


def range_hash(doc, start, length) -> bytes:
    """A hash of the multiset of (document, token range): sorted triples, hashed."""
    triples = np.stack([np.asarray(doc, np.int64), np.asarray(start, np.int64), np.asarray(length, np.int64)], 1)
    triples = triples[np.lexsort(triples.T[::-1])]
    return hashlib.sha256(triples.tobytes()).digest()


def token_ranges(lengths, sizes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every token of the data as its own (document, [t, t + 1)) range: what a decomposition must cover."""
    lengths = np.asarray(lengths, np.int64)
    doc = np.repeat(np.arange(lengths.shape[0]), lengths)
    start = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return doc, start, np.ones_like(doc)


def as_tokens(doc, start, length) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pieces split into single tokens (document, [t, t + 1))."""
    length = np.asarray(length, np.int64)
    d = np.repeat(np.asarray(doc, np.int64), length)
    first = np.repeat(np.cumsum(length) - length, length)
    s = np.repeat(np.asarray(start, np.int64), length) + np.arange(int(length.sum())) - first
    return d, s, np.ones_like(d)


@settings(max_examples=80, deadline=None)
@given(lengths=lengths_st, sizes=st.sampled_from(SIZE_SETS))
def test_decompose_tiles_every_document(lengths, sizes):
    p = decompose(lengths, sizes)
    lengths = np.asarray(lengths, np.int64)
    # the pieces of each document, in order, tile it: they start where the last ended and end at its length
    assert np.all(p.length > 0)
    ends = p.start + p.length
    assert np.all(ends <= lengths[p.doc])  # no piece crosses its document's end
    same = p.doc[1:] == p.doc[:-1]
    np.testing.assert_array_equal(p.start[1:][same], ends[:-1][same])
    assert np.all(p.start[np.r_[True, ~same][: p.start.shape[0]]] == 0)
    per_doc = np.bincount(p.doc, weights=p.length, minlength=lengths.shape[0])
    np.testing.assert_array_equal(per_doc, lengths)
    # sized pieces have their size; the remainder is shorter than the smallest size, at most one a document
    sized = p.size >= 0
    np.testing.assert_array_equal(p.length[sized], np.asarray(sizes)[p.size[sized]])
    assert np.all(p.length[~sized] < sizes[0])
    assert np.bincount(p.doc[~sized], minlength=lengths.shape[0]).max(initial=0) <= 1
    # greedy: a piece is the largest size that fits what is left of its document at its start
    left = lengths[p.doc] - p.start
    for k in range(1, len(sizes)):
        assert not np.any((p.size[sized] == k - 1) & (left[sized] >= sizes[k]))


@settings(max_examples=80, deadline=None)
@given(
    lengths=lengths_st,
    sizes=st.sampled_from(SIZE_SETS),
    scale=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 2**32),
)
def test_rows_hold_every_token_once(lengths, sizes, scale, seed):
    tpb = sizes[-1] * 2 * scale
    if any(tpb % s for s in sizes):
        tpb = int(np.lcm.reduce(sizes)) * scale
    r = curriculum_rows(lengths, sizes, tpb, seed=seed)
    doc = np.concatenate([p.doc for p in r.plans])
    start = np.concatenate([p.start for p in r.plans])
    length = np.concatenate([p.length for p in r.plans])
    # the multiset of (document, token) delivered is the data's, by hash
    assert range_hash(*as_tokens(doc, start, length)) == range_hash(*token_ranges(lengths, sizes))
    assert r.tokens == int(np.sum(lengths))
    for k, p in enumerate(r.plans):
        assert p.ctx == sizes[k]
        fill = np.add.reduceat(p.length, p.row_splits[:-1]) if p.num_pieces else np.zeros(0)
        assert np.all(fill <= sizes[k])  # no row over its length
        single = np.diff(p.row_splits) == 1
        whole = single & (np.add.reduceat(p.length, p.row_splits[:-1]) == sizes[k] if p.num_pieces else single)
        pieces_of_packed = np.repeat(~whole, np.diff(p.row_splits))
        assert np.all(p.length[pieces_of_packed] < sizes[0])  # a row is one whole piece, or packed remainders
        if sizes[k] != r.pack_length and k > 0:
            assert whole.all()
        if k > 0:  # only whole batches
            assert p.num_rows % r.rows_per_batch[k] == 0
    np.testing.assert_array_equal(r.rows_per_batch, tpb // np.asarray(sizes))


def test_rows_are_seeded_and_padding_small():
    rng = np.random.default_rng(3)
    lengths = np.minimum(rng.lognormal(6.2, 1.1, 5000).astype(np.int64) + 1, 20000)
    a = curriculum_rows(lengths, [256, 512, 1024, 2048], 16384, seed=4)
    b = curriculum_rows(lengths, [256, 512, 1024, 2048], 16384, seed=4)
    for pa, pb in zip(a.plans, b.plans):
        np.testing.assert_array_equal(pa.doc, pb.doc)
        np.testing.assert_array_equal(pa.start, pb.start)
    assert 1 - a.tokens / a.slots < 0.01  # padding under 1% of slots
    assert a.pack_length == 256  # these remainders pack tightly into the shortest rows, as in the paper
    heavy = np.minimum(np.round(200 * (rng.pareto(1.1, 20000) + 1)).astype(np.int64), 8192)
    c = curriculum_rows(heavy, [1024, 2048, 4096, 8192], 65536, seed=0)
    assert 1 - c.tokens / c.slots < 0.01 and c.pack_length > 1024  # pieces of 200..1023: longer rows pack them
    shortest = curriculum_rows(heavy, [1024, 2048, 4096, 8192], 65536, seed=0, pack_length=1024)
    assert 1 - shortest.tokens / shortest.slots > 0.01  # what packing them into the shortest would pad
    with pytest.raises(ValueError, match="tokens_per_batch=1000 must be a positive multiple of every length"):
        curriculum_rows(lengths, [256, 512], 1000)
    with pytest.raises(ValueError, match="increasing"):
        decompose(lengths, [512, 256])


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.integers(0, 60), min_size=1, max_size=5),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 5),
    cycles=st.integers(1, 6),
)
def test_order_draws_every_batch_once(batches, seed, epoch, cycles):
    k = len(batches)
    order = curriculum_order(batches, grow_p2_odds(k)[None], [1.0], seed=seed, epoch=epoch, cycles=cycles)
    np.testing.assert_array_equal(np.bincount(order, minlength=k), batches)
    again = curriculum_order(batches, grow_p2_odds(k)[None], [1.0], seed=seed, epoch=epoch, cycles=cycles)
    np.testing.assert_array_equal(order, again)


def test_grow_p2_goes_short_to_long():
    """Over an epoch the mean position of each length's batches increases with the length, and the first tenth
    of the epoch is mostly the shortest, the last tenth mostly the longest (same batches of each length)."""
    order = curriculum_order([400] * 4, grow_p2_odds(4)[None], [1.0], seed=1, epoch=0)
    where = [np.flatnonzero(order == k).mean() for k in range(4)]
    assert where == sorted(where)
    tenth = order.shape[0] // 10
    assert np.bincount(order[:tenth], minlength=4).argmax() == 0
    assert np.bincount(order[-tenth:], minlength=4).argmax() == 3
    mixed = curriculum_order([400] * 4, np.ones((1, 4)), [1.0], seed=1, epoch=0)
    spread = [np.flatnonzero(mixed == k).mean() / mixed.shape[0] for k in range(4)]
    assert max(spread) - min(spread) < 0.1  # a uniform mix has no trend
    assert not np.array_equal(order, curriculum_order([400] * 4, grow_p2_odds(4)[None], [1.0], seed=1, epoch=1))


def test_stages_follow_the_fraction_of_the_epoch():
    """Odds [1, 0] until half the epoch: only the short length while it lasts, then the rest."""
    order = curriculum_order([30, 50], np.array([[1.0, 0.0], [0.0, 1.0]]), [0.5, 1.0], seed=0, epoch=0)
    np.testing.assert_array_equal(order[:30], 0)  # 30 short batches, all in the first stage (40 steps)
    np.testing.assert_array_equal(order[30:], 1)  # the first stage ran out of short: the long ones fill it
    with pytest.raises(ValueError, match="some > 0"):
        curriculum_order([3, 3], np.zeros((1, 2)), [1.0], seed=0, epoch=0)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 200), min_size=1, max_size=60), block=st.sampled_from([4, 8, 16]))
def test_attention_work_counts_match_the_rows(lengths, block):
    """The counts from piece lengths equal those of the rows built: pairs and tiles with in-document work."""
    from datatools.kernels.attention_blocks import block_structure
    from datatools.kernels.curriculum import attention_work
    from datatools.kernels.packing import pack_lengths

    ctx = 64
    plan = pack_lengths(np.asarray(lengths), ctx, algorithm="best_fit_decreasing")
    seg = np.zeros((plan.num_rows, ctx), np.int32)
    for r in range(plan.num_rows):
        at = 0
        for i, (_, _, n) in enumerate(plan.row(r)):
            seg[r, at : at + n] = i + 1
            at += n
    pairs = 0
    for row in seg:
        counts = np.bincount(row[row > 0])
        pairs += int((counts * (counts + 1) // 2).sum())
    work = attention_work(plan, block)
    assert work["pairs"] == pairs
    assert work["document_tiles"] == int(np.count_nonzero(block_structure(seg, block)))
    nb = ctx // block
    assert work["causal_tiles"] == plan.num_rows * nb * (nb + 1) // 2
