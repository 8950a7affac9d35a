"""Plan directories: round trip, grouping on disk, atomic replacement, refusal of other data, lengths-only inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from datatools.io.formats.plan_file import PlanFile, is_plan, write_plan
from datatools.io.sources.inputs import open_documents, open_input, read_lengths
from datatools.kernels.packing import PackOptions, pack_lengths
from datatools.kernels.packing.plan_format import lengths_identity


def _lengths(n=5000, seed=3):
    rng = np.random.default_rng(seed)
    return np.maximum(0, rng.lognormal(5.0, 1.3, n)).astype(np.uint32)


@pytest.mark.parametrize("algorithm", ["best_fit_decreasing", "first_fit", "concat_split"])
@pytest.mark.parametrize("overflow", ["split", "truncate"])
def test_round_trip_is_the_in_memory_plan(tmp_path, algorithm, overflow):
    lengths = _lengths()
    header = write_plan(tmp_path / "p", lengths, PackOptions(512, algorithm, overflow=overflow), source="x")
    plan = PlanFile(tmp_path / "p")
    whole = pack_lengths(lengths, 512, algorithm=algorithm, overflow=overflow)
    got = plan.to_plan()
    for name in ("row_splits", "doc", "start", "length"):
        np.testing.assert_array_equal(getattr(got, name), getattr(whole, name), err_msg=name)
    assert (got.dropped_tokens, got.empty_documents) == (whole.dropped_tokens, whole.empty_documents)
    assert header["num_rows"] == plan.num_rows == whole.num_rows
    assert header["efficiency"] == pytest.approx(whole.efficiency)
    assert whole.lower_bound_rows <= header["lower_bound_rows"] <= header["num_rows"]
    assert header["data"] == lengths_identity(lengths)
    np.testing.assert_array_equal(plan.lengths(), lengths)
    assert isinstance(plan.arrays["doc"], np.memmap)  # read lazily
    assert plan.arrays["length"].dtype == np.uint16 and plan.arrays["doc"].dtype == np.uint32
    rows = np.array([3, 0, 3, plan.num_rows - 1])
    sub = plan.rows_plan(rows)
    assert [sub.row(i) for i in range(4)] == [whole.row(int(r)) for r in rows]


def test_grouped_on_disk_keeps_every_token_near_the_bound(tmp_path):
    lengths = np.maximum(1, np.random.default_rng(0).lognormal(np.log(230) - 0.5, 1.0, 60_000)).astype(np.uint32)
    header = write_plan(tmp_path / "p", lengths, PackOptions(2048), group_docs=3_000)
    plan = PlanFile(tmp_path / "p").to_plan()
    assert (np.bincount(plan.doc, weights=plan.length, minlength=lengths.size) == lengths).all()
    assert header["num_rows"] == plan.num_rows <= 1.001 * header["lower_bound_rows"]


def test_existing_out_is_kept_unless_overwrite(tmp_path):
    write_plan(tmp_path / "p", _lengths(), PackOptions(512))
    before = (tmp_path / "p" / "plan.json").read_text()
    with pytest.raises(ValueError, match="already exists"):
        write_plan(tmp_path / "p", _lengths(seed=4), PackOptions(256))
    assert (tmp_path / "p" / "plan.json").read_text() == before
    (tmp_path / "other").mkdir()
    with pytest.raises(ValueError, match="not a plan directory"):
        write_plan(tmp_path / "other", _lengths(), PackOptions(256), overwrite=True)
    write_plan(tmp_path / "p", _lengths(seed=4), PackOptions(256), overwrite=True)
    assert PlanFile(tmp_path / "p").ctx == 256
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "p"]  # no staging directory left


def test_a_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(ValueError, match="negative"):
        write_plan(tmp_path / "p", np.array([3, -1, 2]), PackOptions(8))
    assert list(tmp_path.iterdir()) == []


def test_identity_refusal_names_both(tmp_path):
    write_plan(tmp_path / "p", _lengths(), PackOptions(512))
    plan = PlanFile(tmp_path / "p")
    plan.check_identity(lengths_identity(_lengths()), "src")
    other = _lengths()
    other[7] += 1
    with pytest.raises(ValueError, match=r"p was planned for other documents than src.*5000 documents"):
        plan.check_identity(lengths_identity(other), "src")


def test_damaged_plans_are_refused_naming_the_file(tmp_path):
    write_plan(tmp_path / "p", _lengths(), PackOptions(512))
    np.save(tmp_path / "p" / "doc.npy", np.zeros(3, np.uint32))
    with pytest.raises(ValueError, match="doc.npy: 3 values"):
        PlanFile(tmp_path / "p")
    head = tmp_path / "p" / "plan.json"
    head.write_text(json.dumps({**json.loads(head.read_text()), "version": 99}))
    with pytest.raises(ValueError, match="version 99"):
        PlanFile(tmp_path / "p")
    with pytest.raises(ValueError, match="not a plan directory"):
        PlanFile(tmp_path)


def test_a_plan_directory_is_a_lengths_only_input(tmp_path):
    lengths = _lengths()
    write_plan(tmp_path / "p", lengths, PackOptions(512))
    assert is_plan(tmp_path / "p")
    inp = open_input(tmp_path / "p")
    assert inp.kind == "lengths"
    np.testing.assert_array_equal(read_lengths(inp), lengths)
    with pytest.raises(ValueError, match="no tokens.npy"):
        open_documents(inp)
    (tmp_path / "bad").mkdir()
    np.save(tmp_path / "bad" / "lengths.npy", np.array([3, -2]))
    with pytest.raises(ValueError, match="negative length -2"):
        read_lengths(open_input(tmp_path / "bad"))
