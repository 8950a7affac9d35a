"""Fuzzing every CLI subcommand and public function with extreme integers, NaN/inf, wrong types, empty and huge
strings and malformed configs (a YAML alias bomb among them): each gets exit status 2 with one line on stderr (or
a ValueError / TypeError / IndexError), never a traceback, an abort or a hang, and leaves no output behind."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from fuzz_cases import (ALLOWED, BAD_CONFIGS, BAD_TRAIN_CONFIGS, CLI_VALUES, cli_cases, function_cases,  # noqa: E402
                        make_world, run_cli)

SECONDS = 30  # generous on a loaded 2-core CI machine; cases take well under a second


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A store, a flat .bin, text inputs, a tokenizer and a good config: what the cases point at."""
    tmp = tmp_path_factory.mktemp("fuzz")
    return tmp, make_world(tmp)


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def check_clean(status: int, out: str, err: str, args) -> None:
    assert status in (0, 2), (status, err[:300], args[:6])
    assert "Traceback" not in err and "Traceback" not in out
    if status:
        assert err.startswith("datatools: error: ") and err.count("\n") == 1 and len(err) < 2200, (err[:300], args[:6])


def _case_ids():
    return [f"{i}" for i in range(len(cli_cases("STORE", "TMP")))]


@pytest.mark.parametrize("index", range(len(cli_cases("STORE", "TMP"))), ids=_case_ids())
def test_cli_extremes(world, index):
    tmp, store = world
    args = cli_cases(str(store), str(tmp))[index]
    before = listing(tmp)
    t0 = time.perf_counter()
    status, out, err = run_cli(args)
    assert time.perf_counter() - t0 < SECONDS, args[:6]
    check_clean(status, out, err, args)
    left = {p for p in listing(tmp) - before if not p.startswith("out-") or status != 0}
    left = {p for p in left if ".partial" in p or ".tmp" in p or status != 0}
    assert left == set(), (left, args[:6])


@pytest.mark.parametrize("text", BAD_CONFIGS + BAD_TRAIN_CONFIGS, ids=[f"config{i}" for i in range(len(BAD_CONFIGS) +
                                                                                                    len(BAD_TRAIN_CONFIGS))])
def test_malformed_configs(world, tmp_path, text):
    _, store = world
    config = tmp_path / "c.yaml"
    config.write_text(text.replace("STORE", str(store)))
    command = "train" if text in BAD_TRAIN_CONFIGS else "pipeline"
    t0 = time.perf_counter()
    status, out, err = run_cli([command, str(config), "--steps", "1"])
    assert time.perf_counter() - t0 < SECONDS
    check_clean(status, out, err, [command, text[:80]])
    assert status == 2


@pytest.mark.parametrize("index", range(len(function_cases())))
def test_public_functions(index):
    name, thunk = function_cases()[index]
    t0 = time.perf_counter()
    try:
        thunk()
    except ALLOWED as exc:
        assert len(str(exc)) < 1000 and "\n" not in str(exc), (name, str(exc)[:200])
    assert time.perf_counter() - t0 < SECONDS, name


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.sampled_from(CLI_VALUES + ["256", "1024", "128", "4"]), min_size=4, max_size=4))
def test_analyze_option_combinations(world, values):
    tmp, store = world
    ctx, tile, buckets, window = values
    args = ["analyze-padding", str(store), "--ctx", ctx, "--tile", tile, "--buckets", buckets, "--window", window]
    t0 = time.perf_counter()
    status, out, err = run_cli(args)
    assert time.perf_counter() - t0 < SECONDS
    check_clean(status, out, err, args)


@settings(max_examples=60, deadline=None)
@given(ctx=st.sampled_from([0, -1, 1, 7, 2**24, 2**24 + 1, 2**31, 2**63]),
       align=st.sampled_from([1, 2, 0, 2**40]), cap=st.sampled_from([None, 1, 0, 2**31]),
       lengths=st.lists(st.sampled_from([0, 1, 5, 2**20, -1, 2**63]), max_size=6))
def test_pack_lengths_combinations(ctx, align, cap, lengths):
    from datatools import pack_lengths

    try:
        plan = pack_lengths(np.array(lengths, dtype=object) if lengths else [], ctx, align=align, max_segments=cap)
    except ALLOWED:
        return
    assert plan.kept_tokens + plan.dropped_tokens == sum(lengths)
