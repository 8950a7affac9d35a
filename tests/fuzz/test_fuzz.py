"""Fuzzing every CLI subcommand and public function with extreme integers, NaN/inf, wrong types, empty and huge
strings and malformed configs (a YAML alias bomb among them): each gets exit status 2 with one line on stderr (or
a ValueError / TypeError / IndexError), never a traceback or an abort, and leaves no output behind. That each case
also ends within its wall-time bound is one ``timing`` test (make test-all), not an assertion of every case."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from fuzz_cases import (  # noqa: E402
    ALLOWED,
    BAD_CONFIGS,
    BAD_TRAIN_CONFIGS,
    CLI_VALUES,
    accepted_outcome,
    cli_cases,
    function_cases,
    make_world,
    run_cli,
)

SECONDS = 30  # each case's wall-time bound (test_every_case_ends_within_its_bound); cases take well under a second


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
    if status:  # one error line; warnings (a link not followed) may come before it, each one line
        err = "".join(line for line in err.splitlines(keepends=True) if not line.startswith("datatools: warning: "))
        assert err.startswith("datatools: error: ") and err.count("\n") == 1 and len(err) < 2200, (err[:300], args[:6])


def _case_ids():
    return [f"{i}" for i in range(len(cli_cases("STORE", "TMP")))]


@pytest.mark.parametrize("index", range(len(cli_cases("STORE", "TMP"))), ids=_case_ids())
def test_cli_extremes(world, index):
    tmp, store = world
    args = cli_cases(str(store), str(tmp))[index]
    before = listing(tmp)
    status, out, err = run_cli(args)
    check_clean(status, out, err, args)
    if status == 0:  # what it produced, against a reference where there is one (accepted_outcome)
        assert not accepted_outcome(args, out, store).startswith("wrong"), accepted_outcome(args, out, store)
    left = {p for p in listing(tmp) - before if not p.startswith("out-") or status != 0}
    left = {p for p in left if ".partial" in p or ".tmp" in p or status != 0}
    assert left == set(), (left, args[:6])


@pytest.mark.parametrize(
    "text",
    BAD_CONFIGS + BAD_TRAIN_CONFIGS,
    ids=[f"config{i}" for i in range(len(BAD_CONFIGS) + len(BAD_TRAIN_CONFIGS))],
)
def test_malformed_configs(world, tmp_path, text):
    _, store = world
    config = tmp_path / "c.yaml"
    config.write_text(text.replace("STORE", str(store)))
    command = "train" if text in BAD_TRAIN_CONFIGS else "pipeline"
    status, out, err = run_cli([command, str(config), "--steps", "1"])
    check_clean(status, out, err, [command, text[:80]])
    assert status == 2


@pytest.mark.parametrize("index", range(len(function_cases())))
def test_public_functions(index):
    name, thunk = function_cases()[index]
    try:
        thunk()
    except ALLOWED as exc:
        assert len(str(exc)) < 1000 and "\n" not in str(exc), (name, str(exc)[:200])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.sampled_from(CLI_VALUES + ["256", "1024", "128", "4"]), min_size=4, max_size=4))
def test_analyze_option_combinations(world, values):
    tmp, store = world
    ctx, tile, buckets, window = values
    args = ["analyze-padding", str(store), "--ctx", ctx, "--tile", tile, "--buckets", buckets, "--window", window]
    status, out, err = run_cli(args)
    check_clean(status, out, err, args)


@settings(max_examples=60, deadline=None)
@given(
    ctx=st.sampled_from([0, -1, 1, 7, 2**24, 2**24 + 1, 2**31, 2**63]),
    align=st.sampled_from([1, 2, 0, 2**40]),
    cap=st.sampled_from([None, 1, 0, 2**31]),
    lengths=st.lists(st.sampled_from([0, 1, 5, 2**20, -1, 2**63]), max_size=6),
)
def test_pack_lengths_combinations(ctx, align, cap, lengths):
    from datatools import pack_lengths

    try:
        plan = pack_lengths(np.array(lengths, dtype=object) if lengths else [], ctx, align=align, max_segments=cap)
    except ALLOWED:
        return
    assert plan.kept_tokens + plan.dropped_tokens == sum(lengths)


@pytest.mark.parametrize("damage", sorted(__import__("fuzz_cases").CORRUPT_STORES))
def test_corrupt_stores_are_refused_by_every_reader(world, damage):
    from fuzz_cases import LENGTHS_UNAFFECTED, corrupt_store_commands

    tmp, store = world
    copy, commands = corrupt_store_commands(store, tmp, damage)
    for args in commands:
        status, out, err = run_cli(args)
        check_clean(status, out, err, args)
        if status == 0:  # only an answer that the damage cannot change: lengths from intact offsets, checked
            assert args[0] == "analyze-padding" and damage in LENGTHS_UNAFFECTED, (damage, args[0])
            assert accepted_outcome(args, out, store).startswith("checked"), accepted_outcome(args, out, store)
        else:
            assert status == 2 and copy in err, (damage, args[0], err[:300])


def test_disk_full_exits_1_with_one_line(world):
    from fuzz_cases import disk_full_outcome

    tmp, _ = world
    how, status, err, left = disk_full_outcome(tmp)
    assert status == 1, (how, err[:300])
    last = err.splitlines()[-1] if err else ""  # progress lines (off a terminal) may come before it
    assert last.startswith("datatools: error: ") and "No space left on device" in last and "Traceback" not in err, err
    assert "RESOURCE_EXHAUSTED" not in err and not left, (how, err)


def test_links_bombs_duplicate_keys_bad_numpy_and_empty_inputs_are_clean(world):
    """Issue 21 defects 3, 4, 6 from outside: every case gives its right exit status, one line naming the file
    when refused, the right document count when answered (a symlink cycle multiplies nothing), within its bound,
    and nothing that was there before is changed or gone."""
    from fuzz_cases import file_case_outcome, file_cases, listing_with_sizes

    tmp, store = world
    bad = []
    for case in file_cases(store, tmp):
        before = listing_with_sizes(tmp / "files")
        status, out, err = run_cli(case["args"])
        verdict = file_case_outcome(case, status, out, err, None)  # untimed: the bounds are the timing test's
        after = listing_with_sizes(tmp / "files")
        changed = sorted(k for k, size in before.items() if after.get(k) != size)
        if not verdict.startswith("clean") or changed:
            bad.append((case["name"], verdict, changed[:3]))
    assert bad == []


def test_permission_cases_exit_1_as_a_non_root_user(world):
    """Unreadable inputs, configs, tokenizers and unwritable output directories, run as a non-root user (uid 65534
    through setpriv when the suite runs as root): exit 1 with one line naming the file, nothing left behind."""
    import shutil
    import tempfile

    from fuzz_cases import file_case_outcome, permission_cases, run_as_user

    tmp, _ = world
    base = Path(tempfile.mkdtemp(prefix="datatools-perm-", dir="/tmp"))
    try:
        cases = permission_cases(base, tmp / "tok.json")
        results = run_as_user([c["args"] for c in cases], base)
        if isinstance(results, str):
            pytest.skip(f"cannot run as a non-root user here: {results}")
        bad = [
            (c["name"], verdict, err[:200])
            for c, (status, out, err, seconds) in zip(cases, results)
            if not (verdict := file_case_outcome(c, status, out, err, seconds)).startswith("clean")
        ]
        assert bad == []
    finally:
        for p in [base, *base.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timing  # wall time: a loaded CI machine can stall any case for seconds
def test_every_case_ends_within_its_bound(world):
    """Every CLI case, malformed config, public function case and file case of this module ends within its bound
    (:data:`SECONDS`; a file case's own, 5 s for the alias bombs): none does work out of proportion to its input."""
    from fuzz_cases import file_cases

    tmp, store = world
    slow = []
    for args in [*cli_cases(str(store), str(tmp)), *config_runs(tmp, store)]:
        t0 = time.perf_counter()
        run_cli(args)
        if (took := time.perf_counter() - t0) >= SECONDS:
            slow.append((args[:6], round(took, 1)))
    for name, thunk in function_cases():
        t0 = time.perf_counter()
        try:
            thunk()
        except ALLOWED:
            pass
        if (took := time.perf_counter() - t0) >= SECONDS:
            slow.append((name, round(took, 1)))
    for case in file_cases(store, tmp):
        t0 = time.perf_counter()
        run_cli(case["args"])
        if (took := time.perf_counter() - t0) > case["seconds"]:
            slow.append((case["name"], round(took, 1)))
    assert slow == []


def config_runs(tmp: Path, store: Path) -> list[list[str]]:
    """The malformed configs of :func:`test_malformed_configs` as command lines (each written under ``tmp``)."""
    runs = []
    for i, text in enumerate(BAD_CONFIGS + BAD_TRAIN_CONFIGS):
        config = tmp / f"timed-config{i}.yaml"
        config.write_text(text.replace("STORE", str(store)))
        runs.append(["train" if text in BAD_TRAIN_CONFIGS else "pipeline", str(config), "--steps", "1"])
    return runs
