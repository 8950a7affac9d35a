"""The loader's loss weights: every host batch carries them (default: none, nothing changes), in every layout."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import random_docs, write_test_store
from datatools.kernels.batch_layouts import number_pieces
from datatools.pipeline import build, build_canonical, parse_config


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_test_store(tmp_path_factory.mktemp("lw") / "store", random_docs(300, seed=5, max_len=900))


def config(store, **extra):
    return parse_config({"source": {"path": str(store)}, "packing": {"ctx": 256}, "batch_size": 8, **extra})


def piece_sums(batch):
    """Each piece's weight sum and whether it has a target."""
    pieces = number_pieces(batch["segment_ids"])[1]
    real = pieces >= 0
    key = (np.arange(pieces.shape[0])[:, None] * 10_000 + pieces)[real]
    _, inverse = np.unique(key, return_inverse=True)
    return (
        np.bincount(inverse, weights=batch["loss_weights"][real].astype(np.float64)),
        np.bincount(inverse, weights=batch["loss_mask"][real]) > 0,
    )


def test_default_adds_no_weights(store):
    batch = next(iter(build_canonical(config(store)).dataset))
    assert "loss_weights" not in batch and "loss_weight_sum" not in batch


@pytest.mark.parametrize("count", [1, 2])
def test_document_weights_per_host_batch(store, count):
    """Every host's rows: each piece with a target weighs 1, the row sums add up to the pieces."""
    for index in range(count):
        cfg = config(store, loss_weighting="document", shard={"index": index, "count": count})
        for _, batch in zip(range(5), build_canonical(cfg).dataset):
            sums, has_target = piece_sums(batch)
            np.testing.assert_allclose(sums[has_target], 1.0, rtol=1e-5)
            assert batch["loss_weights"].dtype == np.float32 and batch["loss_weight_sum"].shape == (8 // count,)
            assert batch["loss_weight_sum"].sum() == np.count_nonzero(has_target)


def test_token_weights_sum_to_the_targets_and_layouts_carry_them(store):
    batch = next(iter(build_canonical(config(store, loss_weighting="token")).dataset))
    assert batch["loss_weight_sum"].sum() == batch["loss_mask"].sum()
    hf = next(iter(build(config(store, loss_weighting="document", format="hf"))))
    canonical = next(iter(build_canonical(config(store, loss_weighting="document")).dataset))
    np.testing.assert_allclose(hf["loss_weights"].sum(), canonical["loss_weight_sum"].sum(), rtol=1e-5)
    assert np.all((hf["loss_weights"] != 0) == (hf["labels"] != -100))


def test_next_document_targets_are_weighed_too(store):
    """With boundary_targets: next_document the weights follow the changed loss mask."""
    batch = next(iter(build(config(store, loss_weighting="document", boundary_targets="next_document"))))
    assert np.all((batch["loss_weights"] != 0) == (batch["loss_mask"] != 0))
    sums, has_target = piece_sums(batch)
    np.testing.assert_allclose(sums[has_target], 1.0, rtol=1e-5)


def test_an_unknown_weighting_is_refused_naming_the_key(store):
    with pytest.raises(ValueError, match="loss_weighting"):
        config(store, loss_weighting="sequence")
