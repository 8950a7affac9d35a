"""Batch formats: every format carries the same targets, and no target crosses a document."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools import materialize, pack_lengths
from datatools.kernels.batch_layouts import FORMATS, IGNORE_INDEX, to_format


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
    m = to_format(b, "maxtext")
    r, t = np.nonzero(m["targets_segmentation"])
    assert set(zip(r.tolist(), t.tolist(), m["targets"][r, t].tolist())) == want
    assert (m["targets_segmentation"][r, t] == m["inputs_segmentation"][r, t]).all()
    np.testing.assert_array_equal(m["inputs"], b["tokens"])
    lv = to_format(b, "levanter")
    assert lv["loss_weight"].dtype == np.float32
    r, t = np.nonzero(lv["loss_weight"])
    assert set(zip(r.tolist(), t.tolist(), lv["tokens"][r, t + 1].tolist())) == want


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, ctx=st.integers(4, 48))
def test_hf_is_padding_free_with_shifted_labels(lengths, ctx):
    b = packed_batch(lengths, ctx)
    h = to_format(b, "hf")
    real = b["segment_ids"] > 0
    np.testing.assert_array_equal(h["input_ids"][0], b["tokens"][real])
    np.testing.assert_array_equal(h["position_ids"][0], b["positions"][real])
    cu = h["cu_seqlens"]
    assert cu[0] == 0 and cu[-1] == real.sum() and (np.diff(cu) > 0).all()
    num_pieces = sum(len(np.unique(row[row > 0])) for row in b["segment_ids"])
    assert cu.shape[0] == num_pieces + 1
    labels = h["labels"][0]
    # HF shifts: label j is predicted at j - 1, never across a piece boundary
    assert (labels[cu[:-1]] == IGNORE_INDEX).all()
    assert int((labels != IGNORE_INDEX).sum()) == int(b["loss_mask"].sum())
    keep = labels != IGNORE_INDEX
    np.testing.assert_array_equal(labels[keep], h["input_ids"][0][keep])
    assert h["max_seqlen"] == int(np.diff(cu).max())


def test_every_format_and_a_clear_error():
    b = packed_batch([5, 7, 3], 8)
    for name in FORMATS:
        assert to_format(b, name)
    with pytest.raises(ValueError, match="format must be one of"):
        to_format(b, "tfds")
    with pytest.raises(ValueError, match="missing loss_mask"):
        to_format({k: v for k, v in b.items() if k != "loss_mask"}, "maxtext")
