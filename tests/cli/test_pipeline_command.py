"""``datatools pipeline``: packaged configs by name, ``--set`` overrides checked by the schema, the workers limit
(issue 21, defects 9 and 10)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import random_docs, write_test_store
from datatools.cli import main
from datatools.pipeline import load_config
from datatools.pipeline.config import MAX_WORKERS
from datatools.pipeline.named_configs import apply_overrides, packaged_configs, resolve_config


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_test_store(tmp_path_factory.mktemp("pc") / "store", random_docs(400, max_len=600))


def test_a_packaged_config_runs_by_name_from_anywhere_with_overrides(tmp_path, monkeypatch, store, capsys):
    monkeypatch.chdir(tmp_path)  # no configs/ here: the name is found in the package
    assert (
        main(
            [
                "pipeline",
                "pretrain_block_8192",
                "--steps",
                "2",
                "--source",
                str(store),
                "--set",
                "workers=0",
                "--set",
                "packing.ctx=512",
                "--set",
                "batch_size=3",
                "--json",
                "-",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["shapes"] == [[3, 512]] and report["config"]["workers"] == 0
    for spelled in ("pretrain_block_8192.yaml", "configs/pretrain_block_8192.yaml"):
        assert load_config(spelled, source=str(store)).packing.ctx == 8192


def test_a_local_file_wins_over_a_packaged_name(tmp_path, monkeypatch, store):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bucketed").write_text(f"source: {{path: {store}}}\npacking: {{ctx: 64}}\n")
    assert load_config("bucketed").packing.ctx == 64


@pytest.mark.parametrize(
    "args, message",
    [
        (["nonesuch"], "no packaged config of that name (packaged: bucketed, "),
        (["finetune_packed_1024", "--set", "packing.ctx=0"], "packing.ctx must be >= 1; got 0"),
        (["finetune_packed_1024", "--set", "packing.ctxx=64"], "unknown key 'ctxx' in packing"),
        (["finetune_packed_1024", "--set", "packing.ctx"], "expected KEY=VALUE"),
        (["finetune_packed_1024", "--set", "batch_size.rows=2"], "batch_size is 16, not a section"),
        (["finetune_packed_1024", "--set", "seed=[1, [2]]"], "a scalar or a flat list"),
        (["finetune_packed_1024", "--set", "shuffle={kind: none}"], "a scalar or a flat list"),
        (["finetune_packed_1024", "--set", "seed=[&a [*a, *a], *a]"], "a scalar or a flat list"),
        (["finetune_packed_1024", "--workers", str(MAX_WORKERS + 1)], f"0<=x<={MAX_WORKERS}"),
        (["finetune_packed_1024", "--set", f"workers={MAX_WORKERS + 1}"], f"workers must be <= {MAX_WORKERS}"),
    ],
)
def test_bad_names_and_overrides_are_named_with_exit_2(args, message, capsys):
    assert main(["pipeline", *args, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("datatools: error: ") and message in err and "Traceback" not in err


def test_the_workers_limit_is_one_number_in_the_schema_the_option_and_the_reference():
    from pathlib import Path

    import datatools

    reference = (Path(datatools.__file__).parent / "configs" / "README.md").read_text()
    assert MAX_WORKERS <= 64  # 1024 processes ran past 60 s on a 16-core machine
    assert f"| `workers` | integer | 0 | >= 0 and <= {MAX_WORKERS:,} |" in reference
    assert load_config("finetune_packed_1024", overrides=[f"workers={MAX_WORKERS}"]).workers == MAX_WORKERS


def test_every_packaged_config_resolves_by_name():
    names = packaged_configs()
    assert {"pretrain_block_8192", "finetune_packed_1024", "bucketed"} <= set(names)
    for name in names:
        assert resolve_config(name).name == f"{name}.yaml"


keys = st.lists(st.sampled_from(["a", "b", "c_1", "packing", "ctx"]), min_size=1, max_size=3).map(".".join)
scalars = st.one_of(
    st.integers(-(10**12), 10**12),
    st.booleans(),
    st.none(),
    st.text("abcxyz_-/", min_size=1, max_size=12).filter(lambda s: s not in ("null", "y", "n")),
)


@given(
    base=st.dictionaries(st.sampled_from(["x", "y_2", "z"]), st.integers(), max_size=3),
    sets=st.lists(st.tuples(keys, scalars), max_size=5),
)
def test_overrides_set_each_path_and_leave_the_rest(base, sets):
    """Applied in order, each KEY=VALUE is found at its dotted path (unless a later one replaced it or a
    section above it); the original mapping is not changed; keys not named keep their values."""
    before = json.dumps(base, sort_keys=True)
    try:
        out = apply_overrides(base, [f"{k}={json.dumps(v)}" for k, v in sets])
    except ValueError as exc:
        assert "not a section" in str(exc)  # a scalar set earlier on the path
        return
    assert json.dumps(base, sort_keys=True) == before
    for i, (key, value) in enumerate(sets):
        later = [k for k, _ in sets[i + 1 :]]
        if any(k == key or key.startswith(k + ".") or k.startswith(key + ".") for k in later):
            continue
        node = out
        for part in key.split("."):
            node = node[part]
        assert node == value
    touched = {k.split(".")[0] for k, _ in sets}
    assert {k: v for k, v in out.items() if k not in touched} == {k: v for k, v in base.items() if k not in touched}


def test_source_keeps_the_set_keys_of_the_new_source(tmp_path, tokenizer_file, texts):
    """Issue 35: ``--source`` replaced the whole section after ``--set`` ran, so ``--set source.column`` was dropped
    and the error then said to set ``source.column``. Now the new source gets every ``--set source.*`` key, and
    nothing of the config's own source (its column names another file's column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"body": texts[:20]}), table)
    config = tmp_path / "c.yaml"
    config.write_text("source: {path: elsewhere/, column: input_ids}\npacking: {ctx: 256}\nbatch_size: 2\n")
    sets = ["source.column=body", f"source.tokenizer={tokenizer_file}"]
    cfg = load_config(config, source=str(table), overrides=sets)
    assert (cfg.source.path, cfg.source.column, str(cfg.source.tokenizer)) == (str(table), "body", str(tokenizer_file))
    assert load_config(config, source=str(table)).source.column != "input_ids"  # the old source's column is gone
    out = tmp_path / "report.json"
    args = ["pipeline", str(config), "--steps", "2", "--source", str(table), "--json", str(out)]
    assert main(args + [a for s in sets for a in ("--set", s)]) == 0
    report = json.loads(out.read_text())
    assert report["documents"] == 20 and report["batches"] == 2  # the table's rows, tokenized by the set tokenizer


def test_a_short_run_with_workers_reports_the_workers_reads_and_the_rate_of_its_steps(tmp_path, store, capsys):
    """With worker processes (a mixture that reads a store and tokenizes text, for example), a run of a few steps
    counts every batch it took in ``bytes_delivered`` (a worker's
    last counts used to stay unwritten: 0.1 of 0.7 MB in the quickstart), and its rate ends with its last step
    (it used to include closing the workers: 2.8 against 229 batches/s)."""
    import time

    import numpy as np

    from datatools.io.formats.store import TokenStore
    from datatools.io.storage import read_stats
    from datatools.pipeline import build_canonical

    cfg = tmp_path / "w.yaml"
    settings = {  # a mixture with a store in it: read in the workers (a store alone refuses them)
        "sources": [{"path": str(store), "name": "a", "weight": 0.5}, {"path": str(store), "name": "b", "weight": 0.5}],
        "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 16},
        "packing": {"mode": "streaming", "ctx": 256, "window": 64},
        "batch_size": 4,
        "format": "datatools",
        "seed": 1,
    }
    cfg.write_text(json.dumps({**settings, "workers": 2}))
    steps, t0 = 6, time.perf_counter()
    assert main(["pipeline", str(cfg), "--steps", str(steps), "--json", "-"]) == 0
    wall = time.perf_counter() - t0
    report = json.loads(capsys.readouterr().out)
    same = iter(build_canonical(load_config(str(cfg), overrides=["workers=0"])).dataset)  # the same batches
    taken = sum(int(np.count_nonzero(next(same)["segment_ids"])) for _ in range(steps))
    assert report["loader"]["bytes_delivered"] >= taken * TokenStore(store).dtype.itemsize
    span = (steps - 1) / report["batches_per_s"]  # from the first batch to the last step
    assert span < wall - report["build_s"] - report["startup_s"] - read_stats.FLUSH_EVERY_S  # not the report, the close


@pytest.mark.parametrize(
    "name, hint",
    [
        ("pretrain_block_8192", "name your data with --source"),
        ("pretrain_mixture_8192", "copy the config and edit its sources' paths"),
    ],
)
def test_a_packaged_config_without_the_demo_data_says_to_give_source(tmp_path, monkeypatch, capsys, name, hint):
    """Issue 58: after ``pip install`` a shipped config by name failed on ``demo_data/store`` with no hint."""
    monkeypatch.chdir(tmp_path)  # no demo_data/ here, as after pip install
    assert main(["pipeline", name, "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("datatools: error: demo_data/") and "\n" not in err
    assert f"the shipped config {name} reads datatools' demo data; {hint}" in err


@pytest.mark.parametrize(
    "extra, says",
    [
        ("packing: {mode: planned}\n", "packing.ctx is required"),  # the schema's check
        ("packing: {mode: planned, ctx: 64}\nworkers: 2\n", "workers=2: a token store"),  # the build's check
    ],
)
def test_config_errors_name_the_file_not_config(tmp_path, store, capsys, extra, says):
    """Issue 58: a config's error said ``config:`` (after the file name, or in its place): now the file alone."""
    path = tmp_path / "mine.yaml"
    path.write_text(f"source: {{path: {store}}}\nbatch_size: 4\n{extra}")
    assert main(["pipeline", str(path), "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"datatools: error: {path}: {says}") and "config:" not in err, err


@pytest.mark.parametrize("hosts", [1, 2])
def test_with_devices_the_report_gives_each_batchs_busiest_device_over_the_mean(tmp_path, store, capsys, hosts):
    """devices: 4 over ``hosts`` hosts: per batch run, this host's busiest device's in-document tiles and tokens
    over the mean, as counted on the balanced schedule's own rows (``BalancedSchedule.work``); printed too."""
    from datatools.kernels.balance import busiest_over_mean
    from datatools.pipeline import build_canonical, parse_config

    keys = {"source": {"path": str(store)}, "packing": {"ctx": 512}, "batch_size": 8, "attention_block": 64}
    keys |= {"devices": 4, "shard": {"index": hosts - 1, "count": hosts}, "format": "datatools"}
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(keys))
    assert main(["pipeline", str(path), "--steps", "5", "--json", str(tmp_path / "r.json")]) == 0
    assert "busiest/mean of" in capsys.readouterr().out
    report = json.loads((tmp_path / "r.json").read_text())
    schedule = build_canonical(parse_config(keys)).schedule
    rows = 8 // hosts  # this host's: the last host's slice of each batch
    want_tiles, want_tokens = [], []
    for j in range(5):
        tiles, tokens = (x[(hosts - 1) * rows : hosts * rows] for x in schedule.work(0, j))
        want_tiles.append(busiest_over_mean(tiles, 4 // hosts))
        want_tokens.append(busiest_over_mean(tokens, 4 // hosts))
    assert report["devices"] == 4 // hosts
    assert report["device_tiles"] == pytest.approx(want_tiles) and report["device_tokens"] == pytest.approx(want_tokens)
    keys.pop("devices")
    path.write_text(json.dumps(keys))
    assert main(["pipeline", str(path), "--steps", "2", "--json", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["devices"] is None and report["device_tiles"] == [] and "busiest/mean" not in capsys.readouterr().out


def test_a_text_source_without_a_tokenizer_names_the_key_that_gives_one(tmp_path, texts, capsys):
    """Issue 58 (rerun): ``pipeline CONFIG --source docs.parquet`` on a text column said ``pass --tokenizer``, an
    option ``datatools pipeline`` does not have; the line now also names the config key and its ``--set``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": texts[:20]}), table)
    config = tmp_path / "c.yaml"
    config.write_text("source: {path: elsewhere/}\npacking: {ctx: 256}\nbatch_size: 2\n")
    assert main(["pipeline", str(config), "--steps", "1", "--source", str(table)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "docs.parquet: column 'text' holds text" in err
    assert "--set source.tokenizer=" in err, err
