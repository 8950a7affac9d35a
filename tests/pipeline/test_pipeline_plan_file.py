"""``packing: {plan: OUT}``: a plan directory on disk gives the in-memory plan's batches; other data is refused."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import random_docs, write_test_store
from datatools.cli import main
from datatools.pipeline import build, parse_config


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_test_store(tmp_path_factory.mktemp("src") / "store", random_docs(800, seed=12, max_len=1500))


def _batches(cfg, n=6):
    it = iter(build(cfg))
    try:
        return [next(it) for _ in range(n)]
    finally:
        if hasattr(it, "close"):
            it.close()


@pytest.mark.parametrize("algorithm", ["best_fit_decreasing", "first_fit"])
def test_plan_file_gives_the_in_memory_batches(store, tmp_path, algorithm, capsys):
    assert main(["pack", str(store), str(tmp_path / "plan"), "--ctx", "512", "--algorithm", algorithm]) == 0
    capsys.readouterr()
    base = {"source": {"path": str(store)}, "batch_size": 4, "seed": 3, "shuffle": {"kind": "full"}}
    memory = _batches(parse_config({**base, "packing": {"ctx": 512, "algorithm": algorithm}}))
    disk = _batches(parse_config({**base, "packing": {"plan": str(tmp_path / "plan")}}))
    assert len(memory) == len(disk)
    for a, b in zip(memory, disk):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    if algorithm == "best_fit_decreasing":  # balanced for 2 devices: the plan file's rows ordered as in memory
        memory = _batches(parse_config({**base, "devices": 2, "packing": {"ctx": 512, "algorithm": algorithm}}))
        disk = _batches(parse_config({**base, "devices": 2, "packing": {"plan": str(tmp_path / "plan")}}))
        for a, b in zip(memory, disk):
            for k in a:
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_plan_of_other_documents_is_refused(store, tmp_path, capsys):
    other = write_test_store(tmp_path / "other", random_docs(800, seed=13, max_len=1500))
    assert main(["pack", str(other), str(tmp_path / "plan"), "--ctx", "512"]) == 0
    capsys.readouterr()
    cfg = parse_config({"source": {"path": str(store)}, "batch_size": 4, "packing": {"plan": str(tmp_path / "plan")}})
    with pytest.raises(ValueError, match=r"plan was planned for other documents than .*store.*800 documents"):
        build(cfg)
    cfg = parse_config(
        {"source": {"path": str(other)}, "batch_size": 4, "packing": {"plan": str(tmp_path / "plan"), "ctx": 1024}}
    )
    with pytest.raises(ValueError, match="planned for ctx 512"):
        build(cfg)


@pytest.mark.parametrize(
    "packing, message",
    [({}, "packing.ctx is required"), ({"plan": "p", "mode": "streaming"}, "needs packing.mode: planned")],
)
def test_packing_needs_ctx_or_a_planned_plan(packing, message):
    with pytest.raises(ValueError, match=message):
        parse_config({"source": {"path": "x"}, "batch_size": 4, "packing": packing})
