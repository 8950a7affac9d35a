"""``datatools warm`` (:mod:`datatools.pipeline.compile_ahead`): after it, a fresh process's first batches compile
no kernel (counted by numba's own cache statistics), and a part that failed is said."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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


@pytest.mark.slow  # ~15 s of CPU compiling the streaming part into an empty cache
def test_after_warm_a_fresh_process_compiles_nothing_for_its_first_batches(tmp_path, monkeypatch):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}  # numba reads it once a process: a new one
    warm = "from datatools.pipeline.compile_ahead import warm\nassert warm(parts=['streaming'], jobs=1).failed == {}"
    subprocess.run([sys.executable, "-c", warm], env=env, check=True)
    out = subprocess.run(
        [sys.executable, "-c", FIRST_BATCHES, _store(tmp_path / "store")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    counts = json.loads(out.stdout.strip().splitlines()[-1])
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
