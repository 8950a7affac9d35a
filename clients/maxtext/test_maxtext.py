"""datatools in MaxText itself (run by ``make test-clients`` in MaxText's own Python 3.12 venv, CPU).

* MaxText's pre-training trains 10 steps from ``datatools.integrations.maxtext`` with a tiny model: the loss
  falls, and its ``total_weights`` per step is datatools' count of targets in the same batch.
* A run stopped at step 10 and restarted from its checkpoint feeds the batches an uninterrupted run feeds:
  steps 10-14 have the same ``total_weights`` and the same loss.
* Two processes (``jax.distributed`` on CPU, ``grain_worker_count: 2``) train 10 steps, each process loading its
  half of the global batch; MaxText's ``total_weights`` is datatools' count over the global batch at every step.
  Restarted as one process (same 2-device mesh) from MaxText's step-10 checkpoint with
  ``expansion_factor_real_data=0.5`` (MaxText's key for fewer hosts), steps 11-14 get the global batches and the
  loss of the uninterrupted run.
* With ``eval_interval`` and ``grain_eval_files`` MaxText evaluates on datatools' eval pipeline.
* ``datatools analyze-padding --maxtext-config`` reports the padding MaxText's own Grain pipeline produces on the
  same data (first fit, cap 4, bins = per-host batch) within 0.5 points, and MaxText's best fit ignores the cap.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import maxtext
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datatools.integrations.maxtext import pipeline_config
from datatools.pipeline import build

PKG = Path(maxtext.__file__).parent
BASE = PKG / "configs" / "base.yml"
TOKENIZER = PKG / "assets" / "tokenizers" / "tokenizer.llama2"  # MaxText reads its pad id even for tokens
ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}
TINY = [
    "base_emb_dim=64",
    "base_num_query_heads=4",
    "base_num_kv_heads=4",
    "base_mlp_dim=128",
    "base_num_decoder_layers=2",
    "head_dim=16",
    "vocab_size=512",
    "attention=dot_product",
    "hardware=cpu",
    "skip_jax_distributed_system=True",
    "enable_goodput_recording=False",
    "monitor_goodput=False",
    f"tokenizer_path={TOKENIZER}",
]


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> Path:
    """3,000 documents of 20-400 tokens: the bytes (+1) of standard-library sources, which a model learns fast."""
    rng = np.random.default_rng(0)
    out, done = [], False
    for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        b = np.frombuffer(p.read_bytes(), np.uint8).astype(np.int32) + 1
        i = 0
        while i < len(b):
            n = int(rng.integers(20, 400))
            out.append(b[i : i + n].tolist())
            i += n
            if len(out) == 3000:
                done = True
                break
        if done:
            break
    path = tmp_path_factory.mktemp("data") / "docs.parquet"
    pq.write_table(pa.table({"tokens": pa.array(out, pa.list_(pa.int32()))}), path)
    return path


def run_maxtext(
    out: Path, data: Path, pipeline: Path, steps: int, metrics: Path, ckpt: bool = True, extra: tuple = ()
) -> list[dict]:
    args = [
        str(BASE),
        "run_name=t",
        f"base_output_directory={out}",
        "dataset_type=grain",
        f"grain_train_files={data}",
        f"steps={steps}",
        f"enable_checkpointing={ckpt}",
        "checkpoint_period=5",
        "async_checkpointing=False",
        "per_device_batch_size=4",
        "max_target_length=128",
        "learning_rate=3e-3",
        "grain_worker_count=0",
        f"metrics_file={metrics}",
        "learning_rate_schedule_steps=15",
        *TINY,
        *extra,
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "datatools.integrations.maxtext", "--pipeline", str(pipeline), *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def datatools_counts(data: Path, pipeline: Path, n: int, split: str = "train", batch: int = 4) -> list[int]:
    """Targets (targets_segmentation != 0) per (global) batch of the pipeline the integration builds for these keys,
    built as one host."""
    keys = {
        "max_target_length": 128,
        "global_batch_size_to_load": batch,
        "grain_train_files": str(data),
        "grain_eval_files": str(data),
        "data_shuffle_seed": 0,
        "max_segments_per_seq": -1,
        "grain_worker_count": 0,
        "num_epoch": 1,
        "enable_data_shuffling": True,
    }
    it = iter(build(pipeline_config(keys, pipeline, split=split)))
    return [int((next(it)["targets_segmentation"] != 0).sum()) for _ in range(n)]


def test_trains_counts_and_resumes_exactly(docs, tmp_path):
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("packing: {mode: planned, algorithm: best_fit_decreasing}\nshuffle: {kind: full}\n")
    first = run_maxtext(tmp_path / "a", docs, pipeline, 10, tmp_path / "a.jsonl")
    loss = [m["learning/loss"] for m in first]
    weights = [int(m["learning/total_weights"]) for m in first]
    assert [int(m["step"]) for m in first] == list(range(10))
    print("loss", [round(x, 3) for x in loss])
    assert np.mean(loss[-3:]) < np.mean(loss[:3]) - 0.5
    counts = datatools_counts(docs, pipeline, 15)
    assert weights == counts[:10]

    resumed = run_maxtext(tmp_path / "a", docs, pipeline, 15, tmp_path / "b.jsonl")  # restores step 9
    straight = run_maxtext(tmp_path / "c", docs, pipeline, 15, tmp_path / "c.jsonl", ckpt=False)
    after = {int(m["step"]): m for m in resumed}
    assert sorted(after) == list(range(10, 15))
    assert [int(after[s]["learning/total_weights"]) for s in range(10, 15)] == counts[10:15]
    np.testing.assert_allclose(
        [after[s]["learning/loss"] for s in range(10, 15)], [m["learning/loss"] for m in straight[10:15]], rtol=1e-5
    )


HOST = Path(__file__).with_name("maxtext_host.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_maxtext_hosts(
    n: int, out: Path, data: Path, pipeline: Path, steps: int, metrics: str, extra: tuple = ()
) -> list[list[dict]]:
    """MaxText's pre-training as ``n`` jax.distributed processes on CPU with 2 devices in all (so the mesh and the
    global batch of 2 x per_device_batch_size = 8 rows are the same for any ``n``), grain_worker_count 2.
    Each process's metrics lines (every process logs the global step metrics)."""
    args = [
        str(BASE),
        "run_name=t",
        f"base_output_directory={out}",
        "dataset_type=grain",
        f"grain_train_files={data}",
        f"steps={steps}",
        "enable_checkpointing=True",
        "checkpoint_period=5",
        "async_checkpointing=False",
        "per_device_batch_size=4",
        "max_target_length=128",
        "learning_rate=3e-3",
        "grain_worker_count=2",
        "learning_rate_schedule_steps=15",
        *TINY,
        *extra,
    ]
    coordinator = f"127.0.0.1:{free_port()}"
    env = {**ENV, "XLA_FLAGS": f"--xla_force_host_platform_device_count={2 // n}"}
    files = [out / f"{metrics}{i}.jsonl" for i in range(n)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HOST),
                coordinator,
                str(n),
                str(i),
                "--pipeline",
                str(pipeline),
                *args,
                f"metrics_file={files[i]}",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    errors = [p.communicate(timeout=900)[1] for p in procs]
    for i, p in enumerate(procs):
        assert p.returncode == 0, f"MaxText process {i} of {n} failed:\n{errors[i][-3000:]}"
    return [[json.loads(line) for line in f.read_text().splitlines()] for f in files]


def test_two_processes_then_one_from_maxtexts_checkpoint(docs, tmp_path):
    """2 processes -> 1 through MaxText's own checkpointing: total_weights equal datatools' global counts at every
    step, before and after the change of host count, and the restarted steps have the uninterrupted run's loss."""
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("packing: {mode: planned, algorithm: best_fit_decreasing}\nshuffle: {kind: full}\n")
    counts = datatools_counts(docs, pipeline, 15, batch=8)
    run = tmp_path / "run"
    two = run_maxtext_hosts(2, run, docs, pipeline, 15, "two")  # checkpoints at steps 0, 5, 10 and 14
    for host, metrics in enumerate(two):
        assert [int(m["step"]) for m in metrics] == list(range(15)), host
        assert [int(m["learning/total_weights"]) for m in metrics] == counts, host
    saved = run / "t" / "checkpoints" / "10" / "iter"
    states = {f.name: json.loads(f.read_text()) for f in sorted(saved.glob("process_*.json"))}
    assert sorted(states) == ["process_0-of-2.json", "process_1-of-2.json"]
    assert states["process_0-of-2.json"] == states["process_1-of-2.json"]  # the global position on every host

    shutil.rmtree(run / "t" / "checkpoints" / "14")  # as if preempted after step 10's checkpoint
    one = run_maxtext_hosts(1, run, docs, pipeline, 15, "one", extra=("expansion_factor_real_data=0.5",))
    after = {int(m["step"]): m for m in one[0]}
    assert sorted(after) == list(range(11, 15))  # restored step 10: model, optimizer and data position
    assert [int(after[s]["learning/total_weights"]) for s in range(11, 15)] == counts[11:15]
    print(
        "2 processes, loss",
        [round(m["learning/loss"], 4) for m in two[0]],
        "\n1 process from step 10, loss",
        [round(after[s]["learning/loss"], 4) for s in range(11, 15)],
    )
    np.testing.assert_allclose(
        [after[s]["learning/loss"] for s in range(11, 15)], [m["learning/loss"] for m in two[0][11:15]], rtol=1e-4
    )


def maxtext_own_padding(data: Path, packing_type: str, cap: int, shuffle: bool = False) -> dict:
    """Padding and most documents per row of MaxText's own Grain pipeline (pre-tokenized Parquet, packing on)."""
    script = f"""
import json, numpy as np
from maxtext.configs import pyconfig
from maxtext.utils import maxtext_utils
from maxtext.input_pipeline import input_pipeline_interface as ipi
argv = ["x", {str(BASE)!r}, "run_name=own", "base_output_directory={data.parent / "own"}", "dataset_type=grain",
        "grain_file_type=parquet", "grain_train_files={data}", "train_data_columns=['tokens']",
        "tokenize_train_data=False", "packing=True", "grain_packing_type={packing_type}",
        "max_segments_per_seq={cap}", "max_target_length=512", "per_device_batch_size=8",
        "enable_data_shuffling={shuffle}", "grain_worker_count=0", "enable_checkpointing=False"] + {TINY!r}
config = pyconfig.initialize(argv)
it, _ = ipi.create_data_iterator(config, maxtext_utils.get_mesh_from_config(config))
real = slots = most = 0
while True:
    try:
        b = next(it)
    except StopIteration:
        break
    seg, inputs = np.asarray(b["inputs_segmentation"]), np.asarray(b["inputs"])
    # tokens are >= 1; MaxText pads with its pad id (-1 here), also in the segmentation of the empty rows
    # batch_and_pad adds to the last batch, so real tokens are counted from the inputs
    real += int((inputs > 0).sum()); slots += inputs.size
    most = max(most, max(len(np.unique(r[r > 0])) for r in seg))
print(json.dumps({{"padding": 1 - real / slots, "rows": slots // 512, "most": most}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True, timeout=600)
    line = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    assert line, proc.stderr[-3000:]
    return json.loads(line[-1])


def analyzer_view(data: Path, tmp_path: Path, packing_type: str, cap: int, shuffle: bool = False) -> dict:
    cfg = tmp_path / "maxtext.yml"
    cfg.write_text(
        f"max_target_length: 512\npacking: true\ngrain_packing_type: {packing_type}\n"
        f"max_segments_per_seq: {cap}\nper_device_batch_size: 8\ntokenize_train_data: false\n"
        f"enable_data_shuffling: {str(shuffle).lower()}\nattention: cudnn_flash_te\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "datatools", "analyze-padding", str(data), "--maxtext-config", str(cfg), "--json", "-"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)["maxtext"]


@pytest.mark.parametrize("shuffle", [False, True])
def test_maxtext_config_reproduces_maxtexts_padding(docs, tmp_path, shuffle):
    """Shuffle off: the same order, so the same rows. On: MaxText's window shuffle and the analyzer's random order
    differ document by document, and agree on the padding."""
    own = maxtext_own_padding(docs, "first_fit", 4, shuffle)
    mt = analyzer_view(docs, tmp_path, "first_fit", 4, shuffle)
    print(f"MaxText first fit cap 4, shuffle {shuffle}:", own, "analyzer:", mt["today"]["padding"], mt["today"]["rows"])
    assert abs(mt["today"]["padding"] - own["padding"]) < 0.005
    assert own["most"] <= 4 and mt["today"]["max_docs_per_row"] <= 4
    assert mt["advice"]["maxtext_settings"]["grain_packing_type"] == "first_fit"


def test_maxtext_best_fit_ignores_the_cap(docs, tmp_path):
    own = maxtext_own_padding(docs, "best_fit", 4)
    mt = analyzer_view(docs, tmp_path, "best_fit", 4)
    print("MaxText best fit 'cap 4':", own, "analyzer:", mt["today"]["padding"], mt["today"]["max_docs_per_row"])
    assert own["most"] > 4  # the cap is not applied: unsafe for cudnn_flash_te
    assert mt["today"]["segment_cap"] is None and mt["today"]["max_docs_per_row"] > 4
    assert abs(mt["today"]["padding"] - own["padding"]) < 0.005
    assert mt["advice"]["maxtext_settings"]["grain_packing_type"] == "first_fit"  # never best_fit with a cap


def test_evaluates_on_the_eval_pipeline(docs, tmp_path):
    """eval_interval > 0 with grain_eval_files: MaxText's eval loop runs on datatools' eval pipeline (no shuffle,
    one epoch, reset before every evaluation), and its eval total_weights are datatools' count."""
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("packing: {mode: planned}\n")
    metrics = run_maxtext(
        tmp_path / "e",
        docs,
        pipeline,
        6,
        tmp_path / "e.jsonl",
        ckpt=False,
        extra=(f"grain_eval_files={docs}", "eval_interval=5", "eval_steps=2"),
    )
    evals = [m for m in metrics if "eval/total_loss" in m]  # MaxText's per-evaluation summary line
    assert evals
    assert all(int(m["eval/total_weights"]) == sum(datatools_counts(docs, pipeline, 2, "eval")) for m in evals)
