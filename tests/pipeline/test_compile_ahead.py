"""``datatools warm`` (:mod:`datatools.pipeline.compile_ahead`): after it, a fresh process's first batches compile
no kernel (counted by numba's own cache statistics), and a part that failed is said."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from datatools.kernels import warm
from datatools.pipeline import compile_ahead

# In a fresh process: the first batches of the users' bucket shape (a block shuffle read in lanes, streaming
# packing) from a uint16 store, then numba's cache hits and misses summed over datatools' kernels.
FIRST_BATCHES = """
import json, sys
import numba
from datatools.pipeline import build
cfg = {"source": {"path": sys.argv[1]}, "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 16},
       "packing": {"mode": "streaming", "ctx": 512, "window": 64}, "batch_size": 4, "num_epochs": 1, "workers": 0,
       "shard": {"index": 0, "count": 2}, "seed": 3}
it = iter(build(cfg))
next(it); next(it)
hits = misses = 0
for name, module in list(sys.modules.items()):
    if name.startswith("datatools"):
        for value in vars(module).values():
            if isinstance(value, numba.core.registry.CPUDispatcher):
                hits += sum(value.stats.cache_hits.values())
                misses += sum(value.stats.cache_misses.values())
print(json.dumps({"hits": hits, "misses": misses}))
"""


def _store(path) -> str:
    compile_ahead._write_store(str(path), 1000)
    return str(path)


def _counts_in_a_fresh_process(script: str, tmp_path, env: dict[str, str]) -> dict:
    """Run ``script`` over a small store in a new process (numba reads ``NUMBA_CACHE_DIR`` once a process) and
    return the JSON counts it prints last."""
    out = subprocess.run(
        [sys.executable, "-c", script, _store(tmp_path / "store")], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # ~15 s of CPU compiling the streaming part into an empty cache
def test_after_warm_a_fresh_process_compiles_nothing_for_its_first_batches(tmp_path, monkeypatch):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}  # numba reads it once a process: a new one
    warm = "from datatools.pipeline.compile_ahead import warm\nassert warm(parts=['streaming'], jobs=1).failed == {}"
    subprocess.run([sys.executable, "-c", warm], env=env, check=True)
    counts = _counts_in_a_fresh_process(FIRST_BATCHES, tmp_path, env)
    assert counts["misses"] == 0, counts  # every kernel the first batches ran came from the cache
    assert counts["hits"] > 0, counts  # and the counting sees them


def test_a_part_that_fails_is_said_and_an_unknown_part_refused(tmp_path, monkeypatch):
    def boom(store):
        raise ValueError("boom")

    monkeypatch.setitem(compile_ahead.PARTS, "broken", boom)
    monkeypatch.setitem(compile_ahead.PARTS, "fine", lambda store: None)
    monkeypatch.setattr(compile_ahead, "_write_store", lambda path, vocab: None)
    report = compile_ahead.warm(parts=["broken", "fine"], jobs=1)  # in this process
    assert report.failed == {"broken": "ValueError: boom"} and set(report.part_seconds) == {"broken", "fine"}
    report = compile_ahead.warm(parts=["broken", "fine"], jobs=2)  # in child processes: neither part is known there
    assert sorted(report.failed) == ["broken", "fine"] and "KeyError" in report.failed["broken"]
    with pytest.raises(ValueError, match="unknown warm-up part 'nope'"):
        compile_ahead.warm(parts=["nope"])


# In a fresh process with an empty cache (a fresh install): the first batch of the users' bucket shape (host 0 of 4,
# a block shuffle read in lanes, streaming packing), then each datatools kernel's signatures and numba's compiles
# (its own overloads, np.empty and the like, included), counted by numba's compile events.
FIRST_BATCH_COMPILES = """
import json, sys
import numba
from numba.core import event
from datatools.pipeline import build
compiles = []
class Count(event.Listener):
    def on_start(self, ev): pass
    def on_end(self, ev):
        f = ev.data["dispatcher"].py_func
        compiles.append(f"{f.__module__.rsplit('.', 1)[1]}.{f.__qualname__}")
event.register("numba:compile", Count())
cfg = {"source": {"path": sys.argv[1]}, "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 16},
       "packing": {"mode": "streaming", "ctx": 512, "window": 64}, "batch_size": 8, "num_epochs": 1, "workers": 0,
       "shard": {"index": 0, "count": 4}, "seed": 3}
next(iter(build(cfg)))
kernels = {}
for name, module in list(sys.modules.items()):
    if name.startswith("datatools"):
        for key, value in vars(module).items():
            if isinstance(value, numba.core.registry.CPUDispatcher) and value.signatures and value.__module__ == name:
                kernels[f"{name.rsplit('.', 1)[1]}.{key}"] = len(value.signatures)
print(json.dumps({"kernels": kernels, "compiles": len(compiles), "compiled": sorted(set(compiles))}))
"""

# kernel -> signatures a fresh install's first batch compiles (issue 52): ~7 s of CPU on 2 cores, against ~10 s when
# numba also compiled the tree helpers, best_fit and the counting glue as kernels of their own (each compiled its
# callees again into its code), a Python wrapper (the round keys) and numpy's min and max in the fill kernel
FIRST_BATCH_KERNELS = {
    "batch_layouts._number_pieces": 1,
    "shuffle._fill_round_keys": 1,
    "shuffle._permute_array": 1,
    "pieces._cut_pieces": 1,
    "pieces.split_histogram": 1,
    "pieces.decreasing_order": 1,
    "pieces.decreasing_runs": 1,
    "planners.best_fit_state": 1,
    "planners.best_fit_resume": 1,
    "counting._count_windows_best": 1,
    "plan._assemble": 1,
    "materialize._first_row_outside": 1,
    "materialize._first_bad_piece": 1,
    "materialize._fill_rows": 1,
}
FIRST_BATCH_MOST_COMPILES = 36  # the kernels above and numba's overloads they call (np.empty, ...); 58 before the cut


def test_a_fresh_install_compiles_only_the_first_batch_kernels_once_each(tmp_path):
    """Counted, not timed: numba's compile CPU follows the kernels and overloads it compiles (~7 s of CPU in all
    before this first batch on 2 cores; ~9 s of CPU for this test). A kernel the first batch does not need, a second
    signature of one (an argument of another dtype), or a wrapper kernel over others fails it."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}  # empty: nothing loads, everything compiles
    counts = _counts_in_a_fresh_process(FIRST_BATCH_COMPILES, tmp_path, env)
    assert counts["kernels"] == FIRST_BATCH_KERNELS
    assert counts["compiles"] <= FIRST_BATCH_MOST_COMPILES, counts


# what a first batch reaches last (after its schedule's kernels): compiled beside it on a cold cache
LAST_KERNELS = {"materialize._first_row_outside", "materialize._first_bad_piece", "materialize._fill_rows"}
LAST_KERNELS |= {"batch_layouts._number_pieces", "plan._assemble"}


@pytest.mark.slow  # ~8 s of CPU: the kernels compiled twice into empty caches
def test_a_first_batch_loads_the_kernels_compiled_beside_it(tmp_path):
    """The process a cold pipeline starts beside itself (``compile_first_batch_beside``) compiles its last kernels
    with the argument types the pipeline's own calls have: run to its end first, the pipeline's first batch
    compiles none of them (counted by numba's compile events; a slab, plan or batch array of another dtype or
    layout in the helper fails it), only its schedule's."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    batch_format = {"format": "datatools", "boundary_targets": "mask", "positions": "restart", "loss_weighting": "none"}
    helper = [sys.executable, "-c", warm.CHILD, "uint16", json.dumps(batch_format)]
    subprocess.run(helper, env=env, check=True)
    counts = _counts_in_a_fresh_process(FIRST_BATCH_COMPILES, tmp_path, env)
    assert counts["kernels"] == FIRST_BATCH_KERNELS  # the same kernels and signatures, loaded or compiled
    assert not LAST_KERNELS & set(counts["compiled"]), counts["compiled"]
    assert "counting._count_windows_best" in counts["compiled"]  # the schedule's own: compiled here


def test_a_cold_pipeline_starts_its_last_kernels_compiling_beside_it(tmp_path, monkeypatch):
    """On a cold cache a store's pipeline starts one process for its first batch's last kernels, for the store's
    token dtype and the config's batch format; on a warm one none."""
    build_module = sys.modules["datatools.pipeline.build"]
    started: list[tuple] = []
    monkeypatch.setattr(build_module, "compile_first_batch_beside", lambda *args: started.append(args))
    store = _store(tmp_path / "store")
    cfg = {"source": {"path": store}, "packing": {"mode": "streaming", "ctx": 512, "window": 64}, "batch_size": 4}
    cfg |= {"format": "maxtext", "positions": "continue", "workers": 0}
    for cold in (False, True):
        monkeypatch.setattr(build_module, "_kernels_cold", lambda cold=cold: cold)
        next(iter(build_module.build(cfg)))
    assert len(started) == 1
    dtype, batch_format = started[0]
    assert dtype == "uint16" and batch_format["format"] == "maxtext" and batch_format["positions"] == "continue"
