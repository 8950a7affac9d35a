"""Typed reports: every command's ``--json`` is the report object its Python API returned, serialized.

Each test wraps the API function the command calls, keeps the object it returned and checks that the JSON on
stdout equals ``report.as_dict()`` field for field (NaN equal to NaN), and that the object is the typed report.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_docs, write_test_store
from datatools.base.reports import Report, as_json_value
from datatools.cli import main


def json_equal(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def capture(monkeypatch, module, name):
    """Wrap ``module.name`` so the report it returns is kept in the returned list."""
    seen = []
    real = getattr(module, name)

    def wrapped(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(module, name, wrapped)
    return seen


def run_and_compare(argv, capsys, seen, cls):
    assert main([*argv, "--json", "-"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(seen) == 1 and isinstance(seen[0], cls) and isinstance(seen[0], Report)
    assert json_equal(printed, seen[0].as_dict()), (printed, seen[0].as_dict())
    assert json_equal(json.loads(seen[0].to_json()), printed)
    return printed, seen[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_test_store(tmp_path_factory.mktemp("reports") / "store", random_docs(300, seed=4, max_len=900))


def test_analyze_padding_json_is_the_api_report(monkeypatch, capsys, store, tmp_path):
    from datatools.analysis import padding_input
    from datatools.analysis.padding_result import PaddingReport

    seen = capture(monkeypatch, padding_input, "analyze_input")  # the command imports it from there when it runs
    printed, report = run_and_compare(
        ["analyze-padding", str(store), "--ctx", "512", "--maxtext-set", "max_target_length=1024"],
        capsys,
        seen,
        PaddingReport,
    )
    assert report.maxtext is not None and report.contexts == [512, 1024]  # the MaxText view is in the API's object
    assert printed["maxtext"]["today"]["ctx"] == 1024 and printed["source"] == str(store)
    assert report.num_sequences == 300 and report.input_bytes > 0


def test_pipeline_json_is_the_api_report(monkeypatch, capsys, store, tmp_path):
    from datatools.pipeline import run as pipeline_run
    from datatools.pipeline.run import PipelineRunReport

    cfg = tmp_path / "p.yaml"
    cfg.write_text(f"source: {{path: {store}}}\npacking: {{ctx: 512}}\nbatch_size: 4\nworkers: 0\n")
    seen = capture(monkeypatch, pipeline_run, "run_pipeline")  # the command imports it from there when it runs
    printed, report = run_and_compare(["pipeline", str(cfg), "--steps", "1"], capsys, seen, PipelineRunReport)
    assert report.batches == 1 and report.batches_per_s == 0.0  # one batch: no rate yet
    assert printed["config"] == {
        "source": str(store),
        "mode": "planned",
        "workers": 0,
        "format": "datatools",
        "batch_size": 4,
    }


def test_shuffle_report_json_is_the_api_report(monkeypatch, capsys):
    from datatools.analysis import shuffle_quality
    from datatools.analysis.shuffle_quality import ShuffleReport

    seen = capture(monkeypatch, shuffle_quality, "shuffle_report")  # the command imports it from there
    printed, report = run_and_compare(
        [
            "shuffle-report",
            "--n",
            "2048",
            "--io-block-size",
            "16",
            "--window-blocks",
            "8",
            "--group-size",
            "32",
            "--batch-size",
            "64",
        ],
        capsys,
        seen,
        ShuffleReport,
    )
    assert list(printed["orders"]) == ["none", "full", "block", "lanes"] and report.orders["none"].groups_per_batch == 2


def test_pack_json_is_the_api_report(monkeypatch, capsys, tmp_path):
    from datatools.jobs import pack_plan
    from datatools.jobs.pack_plan import PackReport

    np.save(tmp_path / "lengths.npy", np.random.default_rng(1).integers(1, 700, 500))
    seen = capture(monkeypatch, pack_plan, "pack_plan")  # the command imports it from there when it runs
    printed, report = run_and_compare(
        ["pack", str(tmp_path), str(tmp_path / "plan"), "--ctx", "512"], capsys, seen, PackReport
    )
    header = json.loads((tmp_path / "plan" / "plan.json").read_text())
    integrity = ("format", "version", "digests", "header_sha256")  # the plan file's own checks, not figures
    assert {k: v for k, v in header.items() if k not in integrity}.items() <= printed.items()
    assert report.input_kind == "lengths" and report.num_rows >= report.lower_bound_rows


def test_verify_json_is_the_api_report(monkeypatch, capsys, store):
    from datatools.io.formats import store_verify
    from datatools.io.formats.store_verify import VerifyReport

    seen = capture(monkeypatch, store_verify, "verify_store")  # the command imports it from there when it runs
    printed, report = run_and_compare(["verify", str(store)], capsys, seen, VerifyReport)
    assert report.documents == 300 and printed["chunks"] == report.chunks


@dataclasses.dataclass
class _Inner(Report):
    values: tuple
    array: np.ndarray


@dataclasses.dataclass
class _Outer(Report):
    inner: _Inner
    by_name: dict
    flag: np.bool_
    maybe: float | None = None


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.integers(-(2**62), 2**62), max_size=8),
    floats=st.lists(st.floats(allow_nan=False), max_size=8),
    maybe=st.none() | st.floats(allow_nan=False),
)
def test_as_dict_gives_plain_json_types_that_round_trip(values, floats, maybe):
    outer = _Outer(
        _Inner(tuple(values), np.asarray(floats, np.float64)),
        {1: np.int64(len(values)), "f": [np.float32(0.5)]},
        np.bool_(True),
        maybe,
    )
    d = outer.as_dict()
    assert d == {
        "inner": {"values": values, "array": floats},
        "by_name": {"1": len(values), "f": [0.5]},
        "flag": True,
        "maybe": maybe,
    }
    assert json.loads(outer.to_json()) == d
    assert type(d["by_name"]["1"]) is int and type(d["flag"]) is bool


def test_as_dict_names_what_json_cannot_hold():
    with pytest.raises(TypeError, match="complex"):
        as_json_value({"x": 1j})
