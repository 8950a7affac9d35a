"""Loss weights by property: under document weighting each piece's weights sum to 1, under token weighting the
weights are the loss mask; zero wherever the mask is; the layouts carry them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.kernels.batch_layouts import FORMATS, number_pieces, to_format
from datatools.kernels.loss_weights import add_loss_weights, loss_weights
from datatools.kernels.packing import materialize, pack_lengths


@st.composite
def packed_batches(draw):
    """A canonical batch packed from random lengths (some longer than ctx, split), under either boundary option."""
    ctx = draw(st.integers(1, 48))
    lengths = np.array(draw(st.lists(st.integers(0, 120), min_size=1, max_size=30)), np.int64)
    algorithm = draw(st.sampled_from(["best_fit_decreasing", "first_fit", "next_fit", "concat_split"]))
    plan = pack_lengths(lengths, ctx, algorithm=algorithm, overflow="split")
    tokens = np.arange(int(lengths.sum()), dtype=np.int32) % 50
    batch = materialize(plan, tokens, np.concatenate(([0], np.cumsum(lengths))))
    boundary = draw(st.sampled_from(["mask", "next_document"]))
    return to_format(batch, "datatools", boundary_targets=boundary)


@settings(max_examples=200, deadline=None)
@given(packed_batches())
def test_document_weights_sum_to_one_per_piece(batch):
    w, sums = loss_weights(batch["segment_ids"], batch["loss_mask"], "document")
    assert w.dtype == np.float32 and w.shape == batch["loss_mask"].shape
    assert np.all(w[batch["loss_mask"] == 0] == 0) and np.all(w >= 0)
    pieces = number_pieces(batch["segment_ids"])[1]
    real = pieces >= 0
    key = np.arange(pieces.shape[0])[:, None] * (pieces.shape[1] + 1) + pieces
    ids, inverse = np.unique(key[real], return_inverse=True)
    per_piece = np.bincount(inverse, weights=w[real].astype(np.float64), minlength=ids.size)
    targets = np.bincount(inverse, weights=(batch["loss_mask"][real] != 0), minlength=ids.size)
    np.testing.assert_allclose(per_piece[targets > 0], 1.0, rtol=1e-5)  # a piece with targets weighs 1
    assert np.all(per_piece[targets == 0] == 0)  # a one-token piece has nothing to weigh
    np.testing.assert_allclose(sums, w.sum(axis=1, dtype=np.float64), rtol=1e-5)
    assert sums.sum() == np.count_nonzero(targets)


@settings(max_examples=100, deadline=None)
@given(packed_batches())
def test_token_weights_are_the_loss_mask(batch):
    w, sums = loss_weights(batch["segment_ids"], batch["loss_mask"], "token")
    np.testing.assert_array_equal(w, batch["loss_mask"] != 0)
    assert w.sum() == batch["loss_mask"].sum() == sums.sum()


def test_one_row_gives_a_scalar_sum_and_none_adds_nothing():
    seg = np.array([1, 1, 1, 2, 2, 2, 2, 0], np.int32)
    mask = np.array([1, 1, 0, 1, 1, 1, 0, 0], np.int32)
    w, s = loss_weights(seg, mask, "document")
    np.testing.assert_allclose(w, [1 / 2, 1 / 2, 0, 1 / 3, 1 / 3, 1 / 3, 0, 0], rtol=1e-6)
    assert s.shape == () and s == 2
    batch = {"segment_ids": seg, "loss_mask": mask}
    assert add_loss_weights(batch, "none") is batch


@pytest.mark.parametrize("bad", ["mean", None, 3])
def test_unknown_weighting_is_named(bad):
    with pytest.raises((ValueError, TypeError), match="loss_weighting"):
        loss_weights(np.ones((1, 4), np.int32), np.ones((1, 4), np.int32), bad)


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="one shape"):
        loss_weights(np.ones((2, 4), np.int32), np.ones((2, 5), np.int32), "token")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_layout_carries_the_weights_of_its_targets(fmt):
    """The weights a layout carries sum to the canonical batch's weight sum, and sit where that layout's
    targets are (MaxText: targets_segmentation != 0; Levanter: loss_mask; hf: labels != -100)."""
    lengths = np.array([5, 40, 3, 70, 1, 12])
    plan = pack_lengths(lengths, 32)
    batch = materialize(
        plan, np.arange(int(lengths.sum()), dtype=np.int32) % 50 + 1, np.concatenate(([0], np.cumsum(lengths)))
    )
    canonical = to_format(batch, "datatools", loss_weighting="document")
    out = to_format(batch, fmt, loss_weighting="document")
    key = {"levanter": "loss_weight"}.get(fmt, "loss_weights")
    where = {
        "datatools": lambda o: o["loss_mask"],
        "maxtext": lambda o: o["targets_segmentation"],
        "levanter": lambda o: o["loss_mask"],
        "hf": lambda o: o["labels"] != -100,
    }[fmt](out)
    assert np.all((out[key] != 0) == (where != 0))
    np.testing.assert_allclose(out[key].sum(), canonical["loss_weight_sum"].sum(), rtol=1e-5)
    assert to_format(batch, fmt).keys().isdisjoint({"loss_weights", "loss_weight", "loss_weight_sum"})
