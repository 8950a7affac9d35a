"""Many hosts for real: N processes joined by ``jax.distributed`` on CPU (coordinator on loopback), each building
its share with ``shard: auto``; at every step the union of their rows is the batch one process builds. Then the
state the 4 processes saved restores into 2 processes (elastic) and the global sequence continues unchanged.
Each run of processes builds the three modes, so process start-up (jax, Grain, numba imports) is paid once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import built_once, random_docs

pytest.importorskip("jax")

from datatools.pipeline import build_canonical, parse_config  # noqa: E402

WORKER = Path(__file__).with_name("many_hosts_worker.py")
SAVE_AT = 3  # many_hosts_worker.SAVE_AT
KEYS = ("tokens", "segment_ids", "positions", "loss_mask")
MODES = {
    "planned": {"packing": {"ctx": 256}, "shuffle": {"kind": "full"}},
    "streaming": {
        "packing": {"ctx": 256, "mode": "streaming", "window": 64},
        "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 8},
    },
    "bucketing": {
        "bucketing": {"boundaries": [64, 128, 256]},
        "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 8},
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_hosts(n: int, configs: dict, out: Path, restore: Path | None = None) -> None:
    """Run ``n`` host processes; each writes its batches per config name into ``out`` (``load_hosts`` reads them)."""
    out.mkdir(parents=True, exist_ok=True)
    coordinator = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                coordinator,
                str(n),
                str(i),
                json.dumps(configs),
                str(out),
                *([str(restore)] if restore else []),
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    for i, p in enumerate(procs):
        assert p.returncode == 0, f"host {i} of {n} failed:\n{errors[i][-3000:]}"


def load_hosts(n: int, out: Path) -> dict[str, list[list[dict]]]:
    """Per config name, each of the ``n`` hosts' batches (a list of steps) that ``run_hosts`` wrote into ``out``."""
    result: dict[str, list[list[dict]]] = {}
    for name in MODES:
        result[name] = []
        for i in range(n):
            with np.load(out / f"{name}_host{i}.npz") as z:
                result[name].append([{k: z[f"{k}_{j}"] for k in KEYS} for j in range(int(z["steps"]))])
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One host's batches, 4 processes' batches and 2 processes' batches restored from the 4's state at SAVE_AT."""

    def configs(root: Path) -> dict[str, dict]:
        source = {"path": str(root / "docs")}
        return {
            name: {"source": source, "batch_size": 8, "seed": 3, "drop_remainder": False, **mode}
            for name, mode in MODES.items()
        }

    def build(root: Path) -> None:  # the processes' runs: once a run, shared by the xdist workers
        docs = random_docs(400, seed=21, max_len=700)
        (root / "docs").mkdir()
        np.save(root / "docs" / "tokens.npy", np.concatenate(docs).astype(np.int32))
        np.save(root / "docs" / "lengths.npy", np.array([len(x) for x in docs], np.int64))
        run_hosts(4, configs(root), root / "four")
        run_hosts(2, configs(root), root / "two", restore=root / "four")

    root = built_once(tmp_path_factory, "many_hosts", build)
    one = {
        name: [{k: b[k] for k in KEYS} for b in build_canonical(parse_config(c)).dataset]
        for name, c in configs(root).items()
    }
    return one, load_hosts(4, root / "four"), load_hosts(2, root / "two"), root / "four"


def assert_union_is(hosts: list[list[dict]], expected: list[dict], first_step: int = 0):
    assert {len(h) for h in hosts} == {len(expected)}, [len(h) for h in hosts]
    for j, batch in enumerate(expected):
        for k in KEYS:
            np.testing.assert_array_equal(
                np.concatenate([h[j][k] for h in hosts]), batch[k], err_msg=f"step {first_step + j}: {k}"
            )


@pytest.mark.parametrize("mode", list(MODES))
def test_union_of_4_jax_processes_is_the_global_batch(runs, mode):
    one, four, _, saved = runs
    assert len(one[mode]) > SAVE_AT + 3
    assert_union_is(four[mode], one[mode])
    states = [json.loads((saved / f"{mode}_state{i}.json").read_text()) for i in range(4)]
    assert all(s == states[0] for s in states)  # one position, the same on every host


@pytest.mark.parametrize("mode", list(MODES))
def test_2_jax_processes_resume_the_4_processes_state(runs, mode):
    one, _, two, _ = runs
    assert_union_is(two[mode], one[mode][SAVE_AT:], first_step=SAVE_AT)
