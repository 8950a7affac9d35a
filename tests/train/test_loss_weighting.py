"""The loss contract: one gradient step is the same unpacked, or packed, sharded over 2 devices and accumulated
over 4 micro-batches, for token and document weighting (float32, 1e-5)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import built_once
from device_workers import run_worker

WORKER = Path(__file__).with_name("loss_weighting_worker.py")


@pytest.fixture(scope="module")
def gradients(tmp_path_factory):
    """The worker's gradients (a fresh process: two host-platform CPU devices need XLA_FLAGS before jax starts)."""
    folder = built_once(tmp_path_factory, "loss_weighting", lambda d: run_worker(WORKER, d / "grads.npz", devices=2))
    return dict(np.load(folder / "grads.npz"))


@pytest.mark.parametrize("weighting", ["token", "document"])
def test_packed_sharded_accumulated_gradient_equals_unpacked(gradients, weighting):
    np.testing.assert_allclose(gradients[f"packed_{weighting}"], gradients[f"ref_{weighting}"], rtol=1e-5, atol=1e-5)
    # the global denominator: every target (token) or every document piece with a target (document)
    np.testing.assert_allclose(
        gradients[f"weight_sum_{weighting}"], gradients[f"ref_weight_sum_{weighting}"], rtol=1e-6
    )


def test_micro_batches_are_uneven_and_a_mean_of_means_differs(gradients):
    """Control: the micro-batches hold different numbers of targets, and averaging their means (what a
    per-micro-batch normalization gives) misses the unpacked gradient by far more than the tolerance."""
    counts = gradients["targets_per_micro_batch"]
    assert counts.max() > 1.5 * counts.min()
    assert np.abs(gradients["control"] - gradients["ref_token"]).max() > 100 * 1e-5


# ~15 s of CPU (two datatools train runs): make test checks accumulation on the packed, sharded gradients above
@pytest.mark.slow
def test_train_accumulating_micro_batches_follows_one_large_batch(tmp_path, capsys):
    """`datatools train` with grad_accum_steps 2 over batches of 2 rows takes the same steps as batches of 4 rows
    (the same rows: the row order does not depend on the batch size), for document weighting."""
    import json

    from conftest import random_docs, write_test_store
    from datatools.cli import main

    store = write_test_store(tmp_path / "store", random_docs(200, seed=11, max_len=600, vocab=97))

    def run(batch_size, accum):
        cfg = tmp_path / f"b{batch_size}.yaml"
        cfg.write_text(
            f"source: {{path: {store}}}\nshuffle: {{kind: full}}\npacking: {{ctx: 128}}\n"
            f"batch_size: {batch_size}\nloss_weighting: document\n"
            "model: {vocab_size: 97, d_model: 16, n_layers: 1, n_heads: 2}\n"
            "train: {steps: 3, learning_rate: 1.0e-2, warmup_steps: 1, grad_clip: 0.0}\n"
        )
        assert main(["train", str(cfg), "--grad-accum-steps", str(accum), "--json", "-"]) == 0
        return json.loads(capsys.readouterr().out)["records"]

    accumulated, whole = run(2, 2), run(4, 1)
    assert [r["rows"] for r in accumulated] == [r["rows"] for r in whole] == [4, 4, 4]
    np.testing.assert_allclose([r["loss"] for r in accumulated], [r["loss"] for r in whole], rtol=1e-5)
