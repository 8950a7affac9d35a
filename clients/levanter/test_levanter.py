"""datatools with the real Levanter (marin-levanter, run by ``make test-clients-levanter`` in Levanter's own
Python 3.12 venv, CPU).

* A cache Levanter's own builder makes from real text (standard-library sources, a tokenizer trained here) is
  read by ``datatools analyze-padding`` with the document and token counts Levanter reports, and every
  document's tokens are Levanter's.
* Levanter trains 10 steps of a tiny Llama from a datatools pipeline (planned packing, block shuffle) through
  its own data config (``DirectDatasetComponent``) and loader: the loss falls; every row it trains on is the
  pipeline's row, weighted by datatools' loss mask; on one packed batch its per-token losses equal each
  document run alone (float32, 1e-5): attention stays within documents and no target crosses one.
* A run restarted from Levanter's checkpoint at step 10 trains steps 10-14 on the batches, and to the losses,
  of an uninterrupted run.
* Levanter's own ``train_lm`` entry point with ``config.data = data_config(...)`` (a local tokenizer directory)
  trains 20 steps; rerun for 25 it restores its checkpoint and trains steps 20-24 to the losses of an
  uninterrupted 25-step run (and the first 20 steps of both are equal too). ``train_lm`` logs its configuration
  (``dataclasses.asdict`` deep-copies the data); ``PipelineDataset`` deep-copies and pickles.
* ``train_lm`` on 2 JAX processes (``jax.distributed`` on loopback, gloo): each process reads half of every batch,
  the two together the batch, and the losses are the one-process run's.
* 4 JAX processes (``jax.distributed`` on loopback) run Levanter's ``DataLoader``: each process reads only the
  rows of its devices' slots (a quarter of every batch), the four together the batch, each row once.
* Levanter applies the truncation saved in a ``tokenizer.json``; datatools' pre-tokenize switches it off.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle
import socket
import subprocess
import sys
import sysconfig
import zlib
from pathlib import Path

import numpy as np
import pytest
from host_share import check_bytes_per_host

from datatools.integrations.levanter import PipelineDataset
from datatools.io.sources.inputs import open_documents, open_input
from datatools.jobs.demo_data import train_tokenizer

HERE = Path(__file__).parent
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"}


def stdlib_paragraphs(limit: int = 4000) -> list[str]:
    """Paragraphs (blank-line separated) of standard-library sources: real text, mostly short documents."""
    out = []
    for f in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        out += [p for p in f.read_text(encoding="utf-8", errors="replace").split("\n\n") if p.strip()]
        if len(out) >= limit:
            return out[:limit]
    return out


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tok")
    train_tokenizer(stdlib_paragraphs(2000), path / "tokenizer.json", vocab_size=1000)
    config = {"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "PreTrainedTokenizerFast"}
    (path / "tokenizer_config.json").write_text(json.dumps(config))  # a local tokenizer directory, no Hub
    return path


@pytest.fixture(scope="module")
def cache(tmp_path_factory, tokenizer_dir):
    """(cache directory, Levanter's TreeCache of it), built by Levanter's own cache builder."""
    from levanter.data.sharded_datasource import UrlDataSource
    from levanter.data.text.cache import build_lm_dataset_cache
    from levanter.data.text.formats import TextLmDatasetFormat
    from levanter.tokenizers import load_tokenizer

    root = tmp_path_factory.mktemp("levanter")
    with open(root / "docs.jsonl", "w") as f:
        for text in stdlib_paragraphs():
            f.write(json.dumps({"text": text}) + "\n")
    path = root / "cache" / "train"
    built = build_lm_dataset_cache(
        str(path), UrlDataSource([str(root / "docs.jsonl")]), TextLmDatasetFormat(), load_tokenizer(str(tokenizer_dir))
    )
    return path, built


def test_analyze_padding_counts_levanters_cache(cache, tmp_path):
    path, built = cache
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "datatools", "analyze-padding", str(path), "--ctx", "1024", "--json", str(report)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(report.read_text())
    print("levanter", len(built), built.ledger.field_counts, "datatools", got["num_sequences"], got["num_tokens"])
    assert got["input"]["kind"] == "levanter"
    assert got["num_sequences"] == len(built) == built.ledger.total_num_rows
    assert got["num_tokens"] == built.ledger.field_counts["input_ids"] == built.flat_field_length("input_ids")
    docs = open_documents(open_input(path))
    theirs = built.get_batch_sync(list(range(len(built))))
    for i, row in enumerate(theirs):
        np.testing.assert_array_equal(docs[i], row["input_ids"])


def run_levanter(pipeline: Path, out: Path, checkpoints: Path, steps: int, per_document: bool = False) -> dict:
    args = [
        sys.executable,
        str(HERE / "levanter_run.py"),
        "--pipeline",
        str(pipeline),
        "--out",
        str(out),
        "--checkpoints",
        str(checkpoints),
        "--steps",
        str(steps),
    ] + (["--per-document"] if per_document else [])
    proc = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_trains_per_document_and_resumes_exactly(cache, tmp_path):
    path, _ = cache
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        f"source: {{path: {path}}}\npacking: {{mode: planned, ctx: 128, overflow: split}}\n"
        f"shuffle: {{kind: block, io_block_size: 64, window_blocks: 16}}\nbatch_size: 8\n"
        f"num_epochs: null\nseed: 0\n"
    )
    first = run_levanter(pipeline, tmp_path / "a.json", tmp_path / "ck", 10, per_document=True)
    loss = [first["losses"][str(s)] for s in range(10)]
    print("loss", [round(x, 3) for x in loss], "per-document gap", first["per_document"])
    assert np.mean(loss[-3:]) < np.mean(loss[:3]) - 0.3

    ours = PipelineDataset(pipeline)
    want = [
        [
            [zlib.crc32(t.astype(np.int32).tobytes()), float(m.sum())]
            for t, m in zip(ours.batch(j)["tokens"], ours.batch(j)["loss_mask"])
        ]
        for j in range(15)
    ]
    # step s trained on the rows of datatools' batch s (Levanter's mixture reorders a block's rows), weighted by
    # datatools' loss mask
    assert [sorted(rows) for rows in first["rows"]] == [sorted(rows) for rows in want[:10]]

    gap, documents = first["per_document"]
    assert documents > 8  # packed rows: more documents than rows
    assert gap <= 1e-5

    resumed = run_levanter(pipeline, tmp_path / "b.json", tmp_path / "ck", 15)  # restores step 10
    straight = run_levanter(pipeline, tmp_path / "c.json", tmp_path / "ck2", 15)
    assert resumed["start"] == 10 and straight["start"] == 0
    assert resumed["rows"] == straight["rows"][10:15]  # the same rows in the same order
    assert [sorted(rows) for rows in resumed["rows"]] == [sorted(rows) for rows in want[10:15]]
    np.testing.assert_allclose(
        [resumed["losses"][str(s)] for s in range(10, 15)],
        [straight["losses"][str(s)] for s in range(10, 15)],
        rtol=1e-5,
    )


def test_levanter_applies_tokenizer_json_truncation(tokenizer_dir, tmp_path):
    """A tokenizer.json saved with truncation: Levanter's tokenizer truncates, datatools' (settings off) does not."""
    from levanter.tokenizers import load_tokenizer

    from datatools.io.formats.tokenizer import open_encoder

    cut = tmp_path / "cut"
    cut.mkdir()
    spec = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    spec["truncation"] = {"direction": "Right", "max_length": 16, "strategy": "LongestFirst", "stride": 0}
    (cut / "tokenizer.json").write_text(json.dumps(spec))
    text = stdlib_paragraphs(50)[10] * 5
    theirs = load_tokenizer(str(cut)).encode_batch([text])[0]
    tokens, lengths = open_encoder(cut / "tokenizer.json").encode([text])
    full = load_tokenizer(str(tokenizer_dir)).encode_batch([text])[0]
    print("levanter", len(theirs), "datatools", int(lengths[0]), "untruncated", len(full))
    assert len(theirs) < len(full)
    assert int(lengths[0]) == len(full)
    np.testing.assert_array_equal(tokens, full)


def write_pipeline(path: Path, cache_path: Path, batch_size: int = 8) -> Path:
    path.write_text(
        f"source: {{path: {cache_path}}}\npacking: {{mode: planned, ctx: 128, overflow: split}}\n"
        f"shuffle: {{kind: block, io_block_size: 64, window_blocks: 16}}\nbatch_size: {batch_size}\n"
        f"num_epochs: null\nseed: 0\n"
    )
    return path


def run_train_lm(pipeline: Path, tokenizer: Path, out: Path, checkpoints: Path, steps: int) -> dict:
    args = [sys.executable, str(HERE / "train_lm_run.py"), "--pipeline", str(pipeline), "--tokenizer", str(tokenizer)]
    args += ["--out", str(out), "--checkpoints", str(checkpoints), "--steps", str(steps)]
    proc = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Failed to dump config" not in proc.stderr + proc.stdout  # train_lm's YAML dump of its config
    got = json.loads(out.read_text())
    got["losses"] = {int(k): v for k, v in got["losses"].items()}
    return got


def test_train_lm_entry_point_trains_and_resumes_exactly(cache, tokenizer_dir, tmp_path):
    pipeline = write_pipeline(tmp_path / "pipeline.yaml", cache[0])
    first = run_train_lm(pipeline, tokenizer_dir, tmp_path / "a.json", tmp_path / "ck", 20)
    resumed = run_train_lm(pipeline, tokenizer_dir, tmp_path / "b.json", tmp_path / "ck", 25)  # restores step 20
    straight = run_train_lm(pipeline, tokenizer_dir, tmp_path / "c.json", tmp_path / "ck2", 25)
    loss = [first["losses"][s] for s in range(20)]
    print("train_lm loss", [round(x, 3) for x in loss])
    print(
        "resumed",
        [resumed["losses"][s] for s in range(20, 25)],
        "straight",
        [straight["losses"][s] for s in range(20, 25)],
    )
    assert sorted(first["losses"]) == list(range(20))
    assert np.mean(loss[-3:]) < np.mean(loss[:3]) - 0.3
    assert sorted(resumed["losses"]) == list(range(20, 25))
    assert sorted(straight["losses"]) == list(range(25))
    np.testing.assert_allclose(
        [resumed["losses"][s] for s in range(20, 25)], [straight["losses"][s] for s in range(20, 25)], rtol=1e-5
    )
    np.testing.assert_allclose(loss, [straight["losses"][s] for s in range(20)], rtol=1e-5)
    # the resumed run read from batch 20 on (after the one element the loader reads to learn the shapes)
    assert resumed["reads"][0][0] == 0 and resumed["reads"][0][2] - resumed["reads"][0][1] == 1
    assert min(j for j, _, _ in resumed["reads"][1:]) == 20


def test_pipeline_dataset_deepcopies_and_pickles(cache, tokenizer_dir, tmp_path):
    from levanter.main.train_lm import TrainLmConfig

    from datatools.integrations.levanter import data_config

    data = data_config(write_pipeline(tmp_path / "pipeline.yaml", cache[0]), tokenizer=str(tokenizer_dir))
    dataset = data.components["datatools"].datasets["train"]
    logged = dataclasses.asdict(TrainLmConfig(data=data))  # what train_lm's configuration logging does
    copied = logged["data"]["components"]["datatools"]["datasets"]["train"]
    assert isinstance(copied, PipelineDataset) and copied is not dataset
    indices = [3, 17, 16, 40, 2]
    want = dataset.rows(indices)
    for other in (
        copied,
        copy.deepcopy(data).components["datatools"].datasets["train"],
        pickle.loads(pickle.dumps(dataset)),
    ):
        assert other.source._lock is not dataset.source._lock
        for a, b in zip(other.rows(indices), want):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_levanter_host_reads_its_share(cache, tmp_path):
    """4 JAX processes, Levanter's DataLoader in each: a process reads the rows its device's slots map to (Levanter's
    mixture permutes the slots of a batch), a quarter of the batch, and the four read the batch, each row once."""
    hosts, batch, steps = 4, 16, 3
    pipeline = write_pipeline(tmp_path / "pipeline.yaml", cache[0], batch_size=batch)
    coordinator = f"127.0.0.1:{free_port()}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "levanter_hosts.py"),
                "--pipeline",
                str(pipeline),
                "--out",
                str(tmp_path / f"h{p}.json"),
            ]
            + ["--coordinator", coordinator, "--process", str(p), "--processes", str(hosts)]
            + ["--steps", str(steps), "--batch-size", str(batch)],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for p in range(hosts)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-4000:]
    got = [json.loads((tmp_path / f"h{p}.json").read_text()) for p in range(hosts)]
    ours = PipelineDataset(pipeline)
    share = batch // hosts
    for p, g in enumerate(got):
        assert g["process"] == p and g["processes"] == hosts
        for step in range(steps):
            assert g["slots"][str(step)] == list(range(p * share, (p + 1) * share))  # Levanter's data axis
    print("reads per host", [[(j, lo, hi) for j, lo, hi in g["reads"]] for g in got])
    print("bytes delivered per host", [g["bytes_delivered"] for g in got])
    for step in range(steps):
        rows = [[r for j, lo, hi in g["reads"] if j == step for r in range(lo, hi)] for g in got]
        assert all(len(r) == share for r in rows)  # each host its quarter ...
        assert sorted(r for host in rows for r in host) == list(range(batch))  # ... and together the batch, once
        whole = ours.batch(step)["tokens"]
        for g, mine in zip(got, rows):  # the rows each host trained on are the rows it read
            want = sorted(zlib.crc32(whole[r].astype(np.int32).tobytes()) for r in mine)
            assert sorted(g["crcs"][step]) == want
    assert all(j < steps for g in got for j, _, _ in g["reads"])
    check_bytes_per_host([g["bytes_delivered"] for g in got])  # the source's own counter, never skipped at 0


def test_train_lm_on_two_jax_processes(cache, tokenizer_dir, tmp_path):
    pipeline = write_pipeline(tmp_path / "pipeline.yaml", cache[0])
    single = run_train_lm(pipeline, tokenizer_dir, tmp_path / "one.json", tmp_path / "ck1", 5)
    coordinator = f"127.0.0.1:{free_port()}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "train_lm_run.py"),
                "--pipeline",
                str(pipeline),
                "--tokenizer",
                str(tokenizer_dir),
            ]
            + ["--out", str(tmp_path / f"p{p}.json"), "--checkpoints", str(tmp_path / "ck2"), "--steps", "5"]
            + ["--coordinator", coordinator, "--process", str(p), "--processes", "2"],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for p in range(2)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, out[-4000:]
    got = [json.loads((tmp_path / f"p{p}.json").read_text()) for p in range(2)]
    assert [g["process"] for g in got] == [0, 1]
    two = {int(k): v for k, v in got[0]["losses"].items()}  # the tracker logs on process 0
    print("two processes", [two[s] for s in range(5)], "one", [single["losses"][s] for s in range(5)])
    np.testing.assert_allclose([two[s] for s in range(5)], [single["losses"][s] for s in range(5)], rtol=1e-4)
    for j in range(5):  # after the one element each loader reads to learn the shapes
        rows = [[r for b, lo, hi in g["reads"][1:] if b == j for r in range(lo, hi)] for g in got]
        assert [len(r) for r in rows] == [4, 4]
        assert sorted(rows[0] + rows[1]) == list(range(8))
