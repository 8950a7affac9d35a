"""What datatools hands Levanter, without Levanter (it lives in its own venv, `make test-clients-levanter`):

* the reader (:class:`~datatools.integrations.levanter_rows.PipelineRows`, all of ``PipelineDataset``'s state)
  survives ``copy.deepcopy`` and pickling, and the copies read the same rows; its lock is made anew;
* under Levanter with 4 hosts, each host asks for the slots its devices hold on the data axis
  (``[p * B / 4, (p + 1) * B / 4)`` of each step), which Levanter's mixture maps to a permutation of the rows of
  datatools' batch; each host reads the pieces of its quarter and no other, and over the 4 hosts the rows read are
  the batch, each once (counted by the store's read counters and by the schedule's pieces).
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import random_docs, write_test_store
from datatools.integrations.levanter_rows import PipelineRows, runs
from datatools.io.storage import read_stats

B, HOSTS, CTX = 32, 4, 128


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "s"
    write_test_store(path, random_docs(1500, seed=3, mean_log=4.0, max_len=400))
    return path


def pipeline(store, mode: str, **extra) -> dict:
    return {
        "source": {"path": str(store)},
        "packing": {"mode": mode, "ctx": CTX, "overflow": "split"},
        "shuffle": {"kind": "block", "io_block_size": 16, "window_blocks": 8},
        "batch_size": B,
        "num_epochs": None,
        "seed": 1,
        **extra,
    }


def same_rows(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("mode", ["planned", "streaming"])
def test_deepcopy_and_pickle_read_the_same_rows(store, mode):
    rows = PipelineRows(pipeline(store, mode))
    indices = [5, 3, 40, 41, 42, 100, 7]
    want = rows.rows(indices)
    deep = copy.deepcopy(rows)
    assert deep._lock is not rows._lock and deep.reads == []
    assert deep._schedule is rows._schedule  # the built pipeline is shared, not copied (its documents, plans)
    same_rows(deep.rows(indices), want)
    back = pickle.loads(pickle.dumps(rows))
    assert back._lock is not rows._lock and back.reads == []
    same_rows(back.rows(indices), want)
    # a copy inside a structure (as Levanter's config logging copies its data config) is one copy
    holder = copy.deepcopy({"a": rows, "b": [rows]})
    assert holder["a"] is holder["b"][0] and holder["a"] is not rows


def test_runs():
    assert runs(np.array([], np.int64)) == []
    assert runs(np.array([0, 1, 2, 5, 7, 8])) == [(0, 3), (5, 6), (7, 9)]


@pytest.mark.parametrize("extra", [{}, {"loss_weighting": "document"}, {"boundary_targets": "next_document"}])
def test_any_rows_equal_the_batch_rows(store, extra):
    rows = PipelineRows(pipeline(store, "streaming", **extra))
    whole = rows.read(2, 0, B)
    weight = whole.get("loss_weight", whole["loss_mask"])
    picked = [2 * B + r for r in (31, 0, 7, 8, 9, 20)]
    got = rows.rows(picked)
    for i, (t, w, s) in zip(picked, got):
        r = i - 2 * B
        np.testing.assert_array_equal(t, whole["tokens"][r])
        np.testing.assert_array_equal(w, weight[r])
        np.testing.assert_array_equal(s, whole["segment_ids"][r])


def test_a_host_asking_step_after_step_is_walked_ahead_in_one_walk(store):
    """Levanter asks for a host's rows step after step: one walk per run of rows builds them ahead, in order, equal
    to rows read alone; a step asked out of order starts a new walk there."""
    walked = PipelineRows(pipeline(store, "streaming"))
    alone = PipelineRows(pipeline(store, "streaming"), build_ahead=0)
    for step in [*range(6), 2, 3]:
        a, b = walked.read(step, 8, 16), alone.read(step, 8, 16)
        for key in b:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    (walk,) = walked._walks.values()
    assert walk.start == 2 and walk.position == 4  # restarted at step 2 after step 5


def delivered(fn, *args):
    """(bytes of tokens the store delivered during ``fn(*args)``, its result)."""
    before = read_stats.snapshot()
    out = fn(*args)
    return read_stats.subtract(read_stats.snapshot(), before).bytes_delivered, out


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), step=st.integers(0, 40))
def test_four_levanter_hosts_each_read_their_quarter(store, seed, step):
    """Levanter's loader in process p asks for slots [p * B/4, (p + 1) * B/4) of the step; its mixture maps the
    step's slots to a permutation of the rows of datatools' batch (random here, as its key makes it)."""
    ours = PipelineRows(pipeline(store, "streaming"), build_ahead=0)  # bytes counted per call: nothing built ahead
    schedule, (epoch, k) = ours._schedule, ours._batches.locate(step)
    whole_bytes, whole = delivered(ours.read, step, 0, B)
    pieces_of_batch = len(schedule.pieces(epoch, k, 0, B)[0])

    perm = np.random.default_rng(seed).permutation(B)  # slot -> row of datatools' batch `step`
    share = B // HOSTS
    seen, host_bytes, host_pieces = [], [], []
    for p in range(HOSTS):
        host = copy.deepcopy(ours)  # a host of its own: its own record of reads
        indices = [step * B + int(perm[s]) for s in range(p * share, (p + 1) * share)]
        read, got = delivered(host.rows, indices)
        host_bytes.append(read)
        # this host read only its own rows, each once ...
        assert all(j == step for j, _, _ in host.reads)
        assert sorted(r for _, lo, hi in host.reads for r in range(lo, hi)) == sorted(i - step * B for i in indices)
        host_pieces.append(sum(len(schedule.pieces(epoch, k, lo, hi)[0]) for _, lo, hi in host.reads))
        for i, (t, _, s) in zip(indices, got):
            np.testing.assert_array_equal(t, whole["tokens"][i - step * B])
            np.testing.assert_array_equal(s, whole["segment_ids"][i - step * B])
        seen += [i - step * B for i in indices]
    # ... and the union of the hosts' rows is the batch, each row once: the pieces (each in one row) add up to the
    # batch's, and so do the tokens the store delivered
    print("pieces per host", host_pieces, "of", pieces_of_batch, "bytes per host", host_bytes, "of", whole_bytes)
    assert sorted(seen) == list(range(B))
    assert sum(host_pieces) == pieces_of_batch
    assert all(0 < n < pieces_of_batch for n in host_pieces)
    assert whole_bytes > 0
    assert sum(host_bytes) == whole_bytes
    assert all(0 < b < whole_bytes / 2 for b in host_bytes)


def test_a_curriculum_is_refused_naming_its_lengths(store):
    """Levanter's DataLoader fixes every batch's shape from one exemplar: a curriculum's lengths are refused."""
    config = {
        "source": {"path": str(store)},
        "curriculum": {"lengths": [64, 128], "tokens_per_batch": 1024, "tile": 64},
    }
    with pytest.raises(
        ValueError, match=r"Levanter trains on rows of one length; this pipeline makes rows of \[64, 128\]"
    ):
        PipelineRows(config)


def test_ids_at_or_above_the_models_vocabulary_are_refused_in_one_line(store):
    """Issue 58: Levanter trained on ids up to 15,999 at ``vocab_size`` 1024 (its embedding has no row for them);
    ``data_config(vocab_size=)`` hands the model's vocabulary to the reader, which checks every row it reads (the
    check ``datatools train`` makes)."""
    top = int(max(max(d) for d in random_docs(1500, seed=3, mean_log=4.0, max_len=400)))
    rows = PipelineRows(pipeline(store, "planned"), vocab_size=512)
    with pytest.raises(ValueError, match=r"^token id \d+ >= vocab_size 512 \(batch 0\): ") as err:
        rows.rows(range(B))
    assert "\n" not in str(err.value)
    ok = PipelineRows(pipeline(store, "planned"), vocab_size=top + 1).rows(range(B))  # the store's largest id fits
    same_rows(ok, PipelineRows(pipeline(store, "planned")).rows(range(B)))
    with pytest.raises(ValueError, match="vocab_size must be"):
        PipelineRows(pipeline(store, "planned"), vocab_size=0)


def test_without_levanter_the_integration_names_the_install_in_one_line(monkeypatch):
    """Issue 58: without Levanter, importing the integration ended in ``No module named 'draccus'``. Now one line:
    the Python it needs and the version the Makefile's client suite tests."""
    import re
    import sys
    from pathlib import Path

    from datatools.base.errors import MissingPackage
    from datatools.integrations.levanter_rows import TESTED_LEVANTER

    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert re.search(r"^LEVANTER_VERSION := (\S+)$", makefile, flags=re.M).group(1) == TESTED_LEVANTER
    monkeypatch.delitem(sys.modules, "datatools.integrations.levanter", raising=False)
    monkeypatch.setitem(sys.modules, "draccus", None)  # as where Levanter is not installed
    with pytest.raises(MissingPackage) as err:
        import datatools.integrations.levanter  # noqa: F401
    line = str(err.value)
    assert "\n" not in line and err.value.__cause__ is None and err.value.__suppress_context__
    assert "needs Python 3.12" in line and f"pip install 'marin-levanter=={TESTED_LEVANTER}'" in line
