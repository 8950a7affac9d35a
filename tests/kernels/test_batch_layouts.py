"""Batch formats: every format carries the same targets, and no target crosses a document."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools import materialize, pack_lengths
from datatools.kernels.batch_layouts import FORMATS, IGNORE_INDEX, number_pieces, to_format


def packed_batch(lengths, ctx, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(2, 50, int(np.sum(lengths))).astype(np.int32)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    plan = pack_lengths(lengths, ctx, algorithm="first_fit")
    return materialize(plan, tokens, offsets)


def targets_of(batch):
    """(row, position, next token) for every predicted target of a canonical batch."""
    r, t = np.nonzero(batch["loss_mask"])
    return set(zip(r.tolist(), t.tolist(), batch["tokens"][r, t + 1].tolist()))


lengths_st = st.lists(st.integers(1, 40), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, ctx=st.integers(4, 48))
def test_loss_mask_never_crosses_a_document(lengths, ctx):
    b = packed_batch(lengths, ctx)
    r, t = np.nonzero(b["loss_mask"])
    assert (t < ctx - 1).all()
    assert (b["segment_ids"][r, t] == b["segment_ids"][r, t + 1]).all()
    assert (b["segment_ids"][r, t] > 0).all()
    real = int((b["segment_ids"] > 0).sum())
    num_pieces = sum(len(np.unique(row[row > 0])) for row in b["segment_ids"])
    assert int(b["loss_mask"].sum()) == real - num_pieces


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, ctx=st.integers(4, 48))
def test_maxtext_and_levanter_carry_the_same_targets(lengths, ctx):
    b = packed_batch(lengths, ctx)
    want = targets_of(b)
    m = to_format(b, "maxtext", positions="continue")
    np.testing.assert_array_equal(m["inputs_position"], b["positions"])
    r, t = np.nonzero(m["targets_segmentation"])
    assert set(zip(r.tolist(), t.tolist(), m["targets"][r, t].tolist())) == want
    assert (m["targets_segmentation"][r, t] == m["inputs_segmentation"][r, t]).all()
    np.testing.assert_array_equal(m["inputs"], b["tokens"])
    lv = to_format(b, "levanter")
    assert lv["loss_mask"].dtype == np.int32
    r, t = np.nonzero(lv["loss_mask"])
    assert set(zip(r.tolist(), t.tolist(), lv["tokens"][r, t + 1].tolist())) == want
    # Levanter's SequencePacker numbering: 0, 1, ... per piece of a row, -1 at padding; same pieces as ours
    seg, lseg = b["segment_ids"], lv["segment_ids"]
    assert ((lseg == -1) == (seg == 0)).all()
    for row, lrow in zip(seg, lseg):
        real = row > 0
        assert lrow[real][0] == 0 if real.any() else True
        np.testing.assert_array_equal(np.diff(lrow[real]) != 0, np.diff(row[real]) != 0)
        assert (np.diff(lrow[real]) >= 0).all() and (np.diff(lrow[real]) <= 1).all()


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, ctx=st.integers(4, 48))
def test_hf_is_padding_free_with_shifted_labels(lengths, ctx):
    b = packed_batch(lengths, ctx)
    h = to_format(b, "hf")
    real = b["segment_ids"] > 0
    np.testing.assert_array_equal(h["input_ids"][0], b["tokens"][real])
    cu = h["cu_seq_lens_q"]
    np.testing.assert_array_equal(h["cu_seq_lens_k"], cu)
    # positions restart in every piece, so transformers finds the pieces from position_ids alone
    np.testing.assert_array_equal(np.flatnonzero(h["position_ids"][0] == 0), cu[:-1])
    assert cu[0] == 0 and cu[-1] == real.sum() and (np.diff(cu) > 0).all()
    num_pieces = sum(len(np.unique(row[row > 0])) for row in b["segment_ids"])
    assert cu.shape[0] == num_pieces + 1
    labels = h["labels"][0]
    # HF shifts: label j is predicted at j - 1, never across a piece boundary
    assert (labels[cu[:-1]] == IGNORE_INDEX).all()
    assert int((labels != IGNORE_INDEX).sum()) == int(b["loss_mask"].sum())
    keep = labels != IGNORE_INDEX
    np.testing.assert_array_equal(labels[keep], h["input_ids"][0][keep])
    assert h["max_length_q"] == h["max_length_k"] == int(np.diff(cu).max())


def test_every_format_and_a_clear_error():
    b = packed_batch([5, 7, 3], 8)
    for name in FORMATS:
        assert to_format(b, name)
    with pytest.raises(ValueError, match="format must be one of"):
        to_format(b, "tfds")
    with pytest.raises(ValueError, match="missing loss_mask"):
        to_format({k: v for k, v in b.items() if k != "loss_mask"}, "maxtext")
    with pytest.raises(ValueError, match="positions must be one of"):
        to_format(b, "hf", positions="absolute")
    with pytest.raises(ValueError, match="boundary_targets must be one of"):
        to_format(b, "hf", boundary_targets=None)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, ctx=st.integers(4, 48))
def test_positions_restart_or_continue(lengths, ctx):
    b = packed_batch(lengths, ctx)
    cont = to_format(b, "datatools", positions="continue")["positions"]
    np.testing.assert_array_equal(cont, b["positions"])
    pos = to_format(b, "datatools")["positions"]
    assert pos.max() < ctx
    for row_seg, row_pos, row_cont in zip(b["segment_ids"], pos, cont):
        for s in np.unique(row_seg[row_seg > 0]):
            where = np.flatnonzero(row_seg == s)
            np.testing.assert_array_equal(row_pos[where], np.arange(where.size))
            np.testing.assert_array_equal(row_cont[where] - row_cont[where[0]], np.arange(where.size))
        assert (row_pos[row_seg == 0] == 0).all()
    np.testing.assert_array_equal(number_pieces(b["segment_ids"][0])[0], pos[0])


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, ctx=st.integers(4, 48))
def test_next_document_targets_are_maxtexts_shift(lengths, ctx):
    """next_document == MaxText's ShiftData on the packed row: every real token with a real successor in its
    row predicts it; mask == next_document minus the boundary targets."""
    b = packed_batch(lengths, ctx)
    nd = to_format(b, "maxtext", boundary_targets="next_document")
    seg, tok = b["segment_ids"], b["tokens"]
    # MaxText: targets = inputs shifted left, targets_segmentation = segmentation shifted left (0 at the end)
    shifted_seg = np.zeros_like(seg)
    shifted_seg[:, :-1] = seg[:, 1:]
    shifted_tok = np.zeros_like(tok)
    shifted_tok[:, :-1] = tok[:, 1:]
    weight = (shifted_seg != 0) & (seg != 0)
    np.testing.assert_array_equal(nd["targets_segmentation"] != 0, weight)
    np.testing.assert_array_equal(nd["targets"][weight], shifted_tok[weight])
    np.testing.assert_array_equal(nd["targets_segmentation"][weight], shifted_seg[weight])
    masked = to_format(b, "maxtext")
    boundary = weight & (shifted_seg != seg)
    np.testing.assert_array_equal(masked["targets_segmentation"] != 0, weight & ~boundary)
