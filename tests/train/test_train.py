"""The JAX step: packing is exact (packed loss and gradients == unpacked), one program per bucket shape."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import random_docs, without_progress, write_test_store
from datatools import materialize, pack_lengths
from datatools.cli import main
from datatools.train.mfu import segment_lengths_sq, step_flops
from datatools.train.model import ModelConfig, init_params, loss_fn

CFG = ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, dtype="float32")


def unpacked_batch(docs, ctx):
    """One document per row, padded to ctx."""
    b = len(docs)
    out = {k: np.zeros((b, ctx), np.int32) for k in ("tokens", "segment_ids", "positions", "loss_mask")}
    for r, d in enumerate(docs):
        n = len(d)
        out["tokens"][r, :n] = d
        out["segment_ids"][r, :n] = 1
        out["positions"][r, :n] = np.arange(n)
        out["loss_mask"][r, : n - 1] = 1
    return out


@jax.jit
def _loss_and_grads(params, batch):
    (loss, count), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, CFG, batch)
    return loss, count, grads


def loss_and_grads(params, batch):
    """Loss, target count and gradients, compiled once per batch shape (op by op, each test took ~18 s)."""
    return _loss_and_grads(params, {k: jnp.asarray(v) for k, v in batch.items()})


# more documents drawn: the same property on other rows (a compile each on a worker): make test-all
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_packed_row_equals_its_documents_unpacked(seed):
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, CFG.vocab_size, int(n)).astype(np.int32) for n in rng.integers(2, 40, 6)]
    ctx = 256
    lengths = np.array([len(d) for d in docs])
    plan = pack_lengths(lengths, ctx, algorithm="best_fit_decreasing")
    assert plan.num_rows == 1 and plan.num_pieces == len(docs)  # every document in one row
    flat, offsets = np.concatenate(docs), np.concatenate(([0], np.cumsum(lengths)))
    packed = materialize(plan, flat, offsets)
    params = init_params(CFG, jax.random.PRNGKey(seed))
    lp, cp, gp = loss_and_grads(params, packed)
    lu, cu, gu = loss_and_grads(params, unpacked_batch(docs, ctx))
    assert float(cp) == float(cu) == float(lengths.sum() - len(docs))
    np.testing.assert_allclose(float(lp), float(lu), rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(gp), jax.tree_util.tree_leaves(gu)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # ~28 s on 2 cores: make test-cluster runs it
def test_cross_contamination_would_be_caught():
    """Control: the same comparison fails when attention may cross documents (so the test has power)."""
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, CFG.vocab_size, 20).astype(np.int32) for _ in range(3)]
    lengths = np.array([20, 20, 20])
    packed = materialize(pack_lengths(lengths, 64), np.concatenate(docs), np.concatenate(([0], np.cumsum(lengths))))
    leaky = dict(packed, segment_ids=(packed["segment_ids"] > 0).astype(np.int32))  # one segment: no isolation
    params = init_params(CFG, jax.random.PRNGKey(0))
    lu, _, _ = loss_and_grads(params, unpacked_batch(docs, 64))
    ll, _, _ = loss_and_grads(params, leaky)
    assert abs(float(ll) - float(lu)) > 1e-4


def test_flops_formula():
    seg = np.array([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 1, 1]])
    assert segment_lengths_sq(seg) == 3 * 4 + 2 * 3 + 6 * 7
    n = CFG.num_params()
    assert step_flops(CFG, 11, segment_lengths_sq(seg)) == 6 * n * 11 + 6 * CFG.n_layers * CFG.d_model * 60


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_test_store(tmp_path_factory.mktemp("train") / "store", random_docs(400, seed=3, max_len=700, vocab=97))


def write_config(path, store, body):
    path.write_text(
        f"source: {{path: {store}}}\nshuffle: {{kind: full}}\nnum_epochs: null\n{body}\n"
        "model: {vocab_size: 97, d_model: 32, n_layers: 1, n_heads: 2}\n"
        "train: {steps: 12, learning_rate: 1.0e-2, warmup_steps: 2, log_every: 4}\n"
    )
    return path


def test_bucketed_training_compiles_once_per_bucket_shape(tmp_path, store, capsys):
    cfg = write_config(
        tmp_path / "b.yaml",
        store,
        "bucketing: {num_buckets: 3, tile: 64, max_len: 512, token_budget: 2048}\ndrop_remainder: true",
    )
    assert main(["train", str(cfg), "--steps", "25", "--json", "-"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["steps"] == 25
    assert len(summary["shapes"]) >= 2  # several buckets were trained on
    assert summary["compilations"] == len(summary["shapes"]) <= 3


def test_train_cli_packed_learns_and_reports(tmp_path, store, capsys):
    cfg = write_config(tmp_path / "p.yaml", store, "packing: {ctx: 256}\nbatch_size: 4")
    assert main(["train", str(cfg), "--json", "-"]) == 0
    result = json.loads(capsys.readouterr().out)
    records, summary = result["records"], result["summary"]
    assert len(records) == 12 and summary["compilations"] == 1
    assert records[-1]["loss"] < records[0]["loss"]
    for key in ("loss", "tokens_per_s", "useful_tokens_per_s", "efficiency", "mfu"):
        assert all(np.isfinite(r[key]) for r in records), key
    assert summary["efficiency"] > 0.95 and 0 < summary["mfu"] < 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(cfg.read_text().replace("n_heads: 2", "n_heads: 3"))
    assert main(["train", str(bad)]) == 2
    assert "model.d_model=32 must split into 3 heads" in capsys.readouterr().err


def test_train_returns_the_typed_report_that_json_writes(tmp_path, store, capsys, monkeypatch):
    from datatools.train import loop
    from datatools.train.loop import StepRecord, TrainReport

    seen, real = [], loop.train  # the command imports it from there when it runs
    monkeypatch.setattr(loop, "train", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    cfg = write_config(tmp_path / "p.yaml", store, "packing: {ctx: 256}\nbatch_size: 4")
    assert main(["train", str(cfg), "--steps", "2", "--json", "-"]) == 0
    (report,) = seen
    assert isinstance(report, TrainReport) and [type(r) for r in report.records] == [StepRecord, StepRecord]
    assert capsys.readouterr().out == report.to_json() + "\n"  # --json is the report returned, as it is
    assert report.summary.steps == 2 and report.summary.shapes == [(4, 256)]


def test_a_non_finite_loss_stops_training_with_status_1(tmp_path, store, capsys, monkeypatch):
    from datatools.train import loop

    real = loop.Trainer.init_state

    def poisoned(self, seed=0):  # parameters that make the loss NaN at the first step
        state = real(self, seed)
        state["params"] = jax.tree_util.tree_map(lambda x: x * jnp.nan, state["params"])
        return state

    monkeypatch.setattr(loop.Trainer, "init_state", poisoned)
    cfg = write_config(tmp_path / "p.yaml", store, "packing: {ctx: 256}\nbatch_size: 4")
    assert main(["train", str(cfg), "--steps", "3"]) == 1
    err = without_progress(capsys.readouterr().err).strip()  # progress lines (compiling, ...) left out
    assert err.count("\n") == 0 and "step 1: the loss became nan; training stopped" in err
    nan_lr = tmp_path / "lr.yaml"
    nan_lr.write_text(cfg.read_text().replace("learning_rate: 1.0e-2", "learning_rate: .nan"))
    assert main(["train", str(nan_lr)]) == 2
    assert "train.learning_rate must be a finite number; got nan" in capsys.readouterr().err


# ~10 s of CPU: make test checks block-sparse against dense on a model's loss and gradients (test_attention.py)
@pytest.mark.slow
def test_blocksparse_training_follows_dense(tmp_path, store, capsys):
    """The same run with attention: blocksparse gives the same losses step by step, and counts its FLOPs."""
    cfg = write_config(tmp_path / "p.yaml", store, "packing: {ctx: 256}\nbatch_size: 4")
    runs = {}
    for attention in ("dense", "blocksparse"):
        assert main(["train", str(cfg), "--steps", "6", "--attention", attention, "--json", "-"]) == 0
        runs[attention] = json.loads(capsys.readouterr().out)
    dense, sparse = runs["dense"]["records"], runs["blocksparse"]["records"]
    np.testing.assert_allclose([r["loss"] for r in sparse], [r["loss"] for r in dense], rtol=1e-4)
    for d, s in zip(dense, sparse):
        assert d["flops"] == s["flops"]  # useful work is the same
        assert s["attention_pairs_computed"] < d["attention_pairs_computed"] == 4 * 256 * 256
        assert s["hardware_flops"] < d["hardware_flops"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(cfg.read_text().replace("n_heads: 2}", "n_heads: 2, attention: blocksparse, attention_block: 96}"))
    assert main(["train", str(bad)]) == 2
    assert "model.attention_block=96 must divide every row length (got 256)" in capsys.readouterr().err


# GCS: make test-all (storage's own tests run every reader on local, s3 and gs; this is train's ~40 s run again)
# both make test-all: storage's own tests read every format from local, s3 and gs, the docs' service blocks run the
# pipeline from S3 and GCS; this is train's ~12 s run again with its config and store in a bucket
@pytest.mark.slow
@pytest.mark.parametrize("bucket", ["s3_bucket", "gcs_bucket"])
def test_train_reads_its_config_and_store_from_object_storage(bucket, request, tmp_path, store, capsys):
    """``datatools train s3://.../train.yaml`` on a store in the bucket: the same losses as the local run, and
    the JSON report written back to the bucket."""
    from datatools.io import storage
    from object_storage import Root

    root = Root(bucket.split("://")[0], request.getfixturevalue(bucket) + "/run")
    local = write_config(tmp_path / "local.yaml", store, "packing: {ctx: 256}\nbatch_size: 4")
    assert main(["train", str(local), "--steps", "4", "--json", "-"]) == 0
    want = [r["loss"] for r in json.loads(capsys.readouterr().out)["records"]]
    remote_store = root.upload(store, "store")
    remote = root.upload(
        write_config(tmp_path / "remote.yaml", remote_store, "packing: {ctx: 256}\nbatch_size: 4"), "train.yaml"
    )
    report = root.path("report.json")
    assert main(["train", remote, "--steps", "4", "--json", report]) == 0
    got = [r["loss"] for r in json.loads(storage.location(report).read_bytes())["records"]]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_train_on_a_plan_file_takes_the_plans_ctx(tmp_path, store, capsys):
    """``packing: {plan: DIR}`` without ``ctx``: training (and its tile-size check) uses the plan's ctx."""
    assert main(["pack", str(store), str(tmp_path / "plan"), "--ctx", "256", "--json", str(tmp_path / "p.json")]) == 0
    capsys.readouterr()  # the pack command's own table
    cfg = write_config(tmp_path / "t.yaml", store, f"packing: {{plan: {tmp_path / 'plan'}}}\nbatch_size: 4")
    assert main(["train", str(cfg), "--steps", "3", "--attention", "blocksparse", "--json", "-"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["steps"] == 3 and summary["shapes"] == [[4, 256]]


def test_accumulating_micro_batches_compiles_one_program_per_length(tmp_path, store, capsys):
    """With grad_accum_steps 2 a step's first micro-batch runs the same program as the others: a curriculum of 2
    lengths stays within its budget of 2 programs (the first micro-batch had its own program: 4 compiled, and
    the run stopped over its budget at step 3)."""
    body = "curriculum: {lengths: [64, 128], tokens_per_batch: 512, tile: 64, schedule: mix}\nseed: 1"
    cfg = write_config(tmp_path / "c.yaml", store, body)
    assert main(["train", str(cfg), "--steps", "6", "--grad-accum-steps", "2", "--json", "-"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert sorted(tuple(s) for s in summary["shapes"]) == [(4, 128), (8, 64)]
    assert summary["compilations"] == summary["compile_budget"] == 2


def test_curriculum_run_compiles_exactly_one_program_per_length(tmp_path, store, capsys, monkeypatch):
    """A K-length curriculum run trains on all K lengths with exactly K compiled step programs, reports attention
    FLOPs and MFU per length; a program over the budget stops the run (exit 1); a variable-width kernel is refused."""
    body = "curriculum: {lengths: [64, 128, 256], tokens_per_batch: 1024, tile: 64, schedule: mix}\nseed: 1"
    cfg = write_config(tmp_path / "c.yaml", store, body)
    assert main(["train", str(cfg), "--steps", "24", "--json", "-"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert sorted(tuple(s) for s in summary["shapes"]) == [(4, 256), (8, 128), (16, 64)]  # every length ran
    assert summary["compilations"] == summary["compile_budget"] == 3
    per = {d["length"]: d for d in summary["per_length"]}
    assert sorted(per) == [64, 128, 256] and sum(d["steps"] for d in per.values()) == 24
    for d in per.values():
        assert d["tokens"] == d["steps"] * 1024
        assert 0 < d["attention_flops"] <= d["attention_flops_executed"]  # in-document pairs <= dense pairs
    # per token, a longer length holds longer pieces: more attention work per token
    per_token = [per[n]["attention_flops"] / per[n]["useful_tokens"] for n in (64, 128, 256)]
    assert per_token == sorted(per_token)

    from datatools.train import step

    real = step.Trainer.compilations
    # a jax that retraced the step once per length more (e.g. a weak-typed input changing): over the budget
    monkeypatch.setattr(step.Trainer, "compilations", lambda self: real(self) + 3)
    assert main(["train", str(cfg), "--steps", "3"]) == 1
    assert "step programs compiled for a curriculum of 3 lengths" in capsys.readouterr().err
    monkeypatch.undo()
    sparse = tmp_path / "s.yaml"
    sparse_model = "n_heads: 2, attention: blocksparse, attention_block: 64}"
    sparse.write_text(cfg.read_text().replace("n_heads: 2}", sparse_model))
    assert main(["train", str(sparse)]) == 2
    assert "a curriculum compiles one program per length (3)" in capsys.readouterr().err


@pytest.mark.slow  # a JAX compile of the step and of the evaluation: 20 s on the loaded 2-core VM
def test_evaluation_is_the_objective_on_held_out_batches(tmp_path, store):
    """With a learning rate of 0 the parameters stay as initialized: the held-out loss of the first batch is the loss
    the first step reported on it."""
    from datatools.pipeline import build_canonical
    from datatools.train.loop import load_train_config, train

    path = write_config(tmp_path / "e.yaml", store, "packing: {ctx: 256}\nbatch_size: 4")
    frozen = tmp_path / "frozen.yaml"
    frozen.write_text(path.read_text().replace("learning_rate: 1.0e-2", "learning_rate: 0.0"))
    cfg = load_train_config(frozen, steps=1)
    first = next(iter(build_canonical(cfg.pipeline.replace(format="datatools")).dataset))
    report = train(cfg, evaluation={"first": [dict(first)]})
    assert report.evaluation["first"] == pytest.approx(report.records[0].loss, rel=1e-5)
