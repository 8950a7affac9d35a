"""Grain worker processes started by a pipeline: a script that cannot host them fails within seconds with the fix,
and a guarded script exits quietly (issue 21, defect 8)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import random_docs
from datatools.grain.worker_processes import _is_main_test, unguarded_main_line

# 20,000 documents: the pickled pipeline is far over a pipe's 64 KiB, the case that hung for ever
CONFIG = (
    "{'source': {'path': %r}, 'shuffle': {'kind': 'block', 'io_block_size': 64, 'window_blocks': 64}, "
    "'packing': {'mode': 'streaming', 'ctx': 512, 'window': 256}, 'batch_size': 4, 'format': 'maxtext', "
    "'workers': 2}"
)


@pytest.fixture(scope="module")
def big_store(tmp_path_factory) -> Path:
    """A Parquet table of token ids: a source read with worker processes (a token store refuses them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path_factory.mktemp("wp") / "docs.parquet"
    docs = [d.astype("int32") for d in random_docs(20_000, mean_log=3.0, max_len=200)]
    pq.write_table(pa.table({"input_ids": pa.array(docs, pa.list_(pa.int32()))}), path)
    return path


def run_script(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess, float]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("the script hung (killed after 60 s)")
    return done, time.perf_counter() - t0


def test_an_unguarded_script_fails_within_seconds_naming_the_guard(tmp_path, big_store):
    done, seconds = run_script(
        tmp_path,
        f"""
        from datatools.pipeline import build
        ds = build({CONFIG % str(big_store)})
        it = iter(ds)
        print(next(it)["inputs"].shape)
        """,
    )
    assert done.returncode != 0
    assert seconds < 30, seconds
    assert 'if __name__ == "__main__":' in done.stderr
    assert "script.py, line 4" in done.stderr  # the statement that iterates, named
    assert "WorkerStartError" in done.stderr


def test_a_guarded_script_runs_and_exits_with_nothing_on_stderr(tmp_path, big_store):
    done, _ = run_script(
        tmp_path,
        f"""
        from datatools.pipeline import build

        if __name__ == "__main__":
            ds = build({CONFIG % str(big_store)})
            it = iter(ds)                  # a live iterator, with workers, still held at exit
            batch = next(it)               # and a batch
            state = it.get_state()
            print(batch["inputs"].shape)
        """,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "(4, 512)"
    assert done.stderr.strip() == ""


@pytest.mark.parametrize(
    "test, expected",
    [
        ('__name__ == "__main__"', True),
        ("'__main__' == __name__", True),
        ('__name__ != "__main__"', False),
        ("x == '__main__'", False),
        ("__name__ == '__mp_main__'", False),
    ],
)
def test_the_main_guard_is_recognized(test, expected):
    import ast

    assert _is_main_test(ast.parse(test, mode="eval").body) is expected


def test_no_check_outside_a_script():
    assert unguarded_main_line() is None  # pytest's __main__ is not at the top of this call stack


def test_a_worker_killed_mid_run_surfaces_within_seconds(tmp_path, big_store):
    done, seconds = run_script(
        tmp_path,
        f"""
        import multiprocessing, os, signal, time
        from datatools.pipeline import build

        if __name__ == "__main__":
            it = iter(build({CONFIG % str(big_store)}))
            next(it)
            for child in multiprocessing.active_children():
                os.kill(child.pid, signal.SIGKILL)
            t0 = time.perf_counter()
            try:
                while True:
                    next(it)
            except StopIteration:
                print("finished")
            except RuntimeError as exc:
                print(type(exc).__name__, round(time.perf_counter() - t0), str(exc)[:300])
        """,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    name, wait, message = done.stdout.split(" ", 2)
    assert name == "WorkerDiedError" and int(wait) < 30, done.stdout
    assert "worker process died" in message and "exit code -9" in message


@pytest.mark.parametrize(
    "source, spec_name, unguarded",
    [
        ("x = 1\nresult = f()\n", None, True),
        ("if __name__ == '__main__':\n    result = f()\n", None, False),
        ("def g():\n    return f()\n\nif '__main__' == __name__:\n    result = g()\n", None, False),
        ("result = f()\n", "mypkg.__main__", False),  # python -m mypkg: spawn does not run it again
        ("result = f()\n", "mypkg.script", True),  # python -m mypkg.script: it does
    ],
)
def test_the_call_site_is_judged_as_spawn_would(tmp_path, monkeypatch, source, spec_name, unguarded):
    import importlib.machinery
    import types

    path = tmp_path / "main_script.py"
    path.write_text(source)
    module = types.ModuleType("__main__")
    module.__file__ = str(path)
    module.__spec__ = importlib.machinery.ModuleSpec(spec_name, None) if spec_name else None
    module.f = unguarded_main_line
    monkeypatch.setitem(sys.modules, "__main__", module)
    exec(compile(source, str(path), "exec"), vars(module))
    assert (vars(module)["result"] is not None) is unguarded
    if unguarded:
        assert vars(module)["result"] == (str(path), source.count("\n", 0, source.index("result")) + 1)


def test_more_workers_than_cpus_can_feed_is_warned_about(monkeypatch):
    import datatools.grain.worker_processes as wp
    import grain

    monkeypatch.setattr(wp, "_cpus", lambda: 2)
    ds = grain.MapDataset.range(10).to_iter_dataset()
    with pytest.warns(UserWarning, match=r"workers=9 on 2 CPUs: capped at 8 .*measured on 2 cores"):
        capped = wp.prefetch_in_processes(ds, 9)  # building starts nothing: no process is spawned here
    assert capped.workers == 8
    with pytest.warns(UserWarning, match=r"workers=64 on 2 CPUs: capped at 8"):
        assert wp.prefetch_in_processes(ds, 64).workers == 8  # the documented maximum: 579 s for 2 steps before
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert wp.prefetch_in_processes(ds, 0) is ds
        wp.prefetch_in_processes(ds, 8)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_killed_while_its_pipeline_is_written_to_it_does_not_block_the_writer():
    """multiprocessing's spawn writes the pickled pipeline into a pipe whose read end the parent keeps open until the
    write returns: past 64 KiB, a worker killed before reading it (a Ctrl-C while workers start) blocked the write
    for ever. A stand-in worker that never reads its pipe: once stopped, the pipe is drained and the write ends."""
    import os
    import threading

    from datatools.grain.worker_processes import _running, _stop_starting

    read_end, write_end = os.pipe()
    worker = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"pipe_handle={read_end}"], pass_fds=(read_end,)
    )
    written = threading.Event()

    def write() -> None:
        with open(write_end, "wb") as f:  # closes the write end once written (as spawn's _launch does)
            f.write(b"x" * (1 << 20))
        written.set()

    threading.Thread(target=write, daemon=True).start()
    time.sleep(0.3)
    assert not written.is_set()  # blocked: nobody reads
    _stop_starting({worker.pid}, grace_s=0.1)
    assert written.wait(60)  # the write ended (it would wait for ever): an event, with a did-not-hang bound
    worker.wait(5)
    assert not _running(worker.pid)
    os.close(read_end)
