"""Pipelines from configs: validation, determinism across worker counts, checkpoint resume, the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import random_docs, without_progress, write_test_store
from datatools.cli import main
from datatools.pipeline import build, load_config, parse_config

MODES = {
    "planned": {"packing": {"ctx": 512}, "shuffle": {"kind": "full"}, "format": "maxtext"},
    "streaming": {
        "packing": {"ctx": 512, "mode": "streaming", "window": 64},
        "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 16},
    },
    "bucketing": {
        "bucketing": {"num_buckets": 3, "tile": 64, "max_len": 512, "token_budget": 4096},
        "shuffle": {"kind": "full"},
        "format": "levanter",
    },
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_test_store(tmp_path_factory.mktemp("src") / "store", random_docs(1500, seed=11, max_len=1500))


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """The store's documents as a Parquet token column: a source read with worker processes (a store refuses
    them: it is read by the host's one reader)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path_factory.mktemp("src") / "docs.parquet"
    docs = random_docs(1500, seed=11, max_len=1500)
    pq.write_table(pa.table({"input_ids": pa.array(docs, pa.list_(pa.int32()))}), path)
    return path


def source(store, table, workers: int):
    """The store without workers (its one reader), the same documents as a table with them."""
    return table if workers else store


def config(store, mode, **extra):
    return parse_config({"source": {"path": str(store)}, "batch_size": 8, "seed": 5, **MODES[mode], **extra})


def take(ds_or_iter, n):
    it = iter(ds_or_iter)
    out = [next(it) for _ in range(n)]
    return out, it


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def close(it):
    if hasattr(it, "close"):
        it.close()


# ~7 s of CPU a mode (2 Grain workers spawned): make test runs streaming's, make test-all every mode
@pytest.mark.parametrize("mode", [m if m == "streaming" else pytest.param(m, marks=pytest.mark.slow) for m in MODES])
def test_same_batches_with_one_and_two_workers(store, table, mode):
    """The store's one reader, the table in this process and in 2 workers: the same batches."""
    one = list(build(config(store, mode, workers=0)))
    it = iter(build(config(table, mode, workers=2)))
    two = list(it)
    close(it)
    assert len(one) > 10
    assert_same(one, two)
    assert_same(one, list(build(config(table, mode, workers=0))))
    assert_same(one, list(build(config(store, mode, workers=0))))  # and the same again


def test_a_store_refuses_worker_processes_in_one_line(store):
    with pytest.raises(ValueError, match=r"^config: workers=2: a token store .* read by one reader per host") as e:
        build(config(store, "streaming", workers=2))
    assert "\n" not in str(e.value)


# with 2 workers ~12 s a mode on 2 cores: make test-cluster runs them; make test restores a 2-worker state with 0 and 1
# workers (below), and the batches do not depend on the worker count (test_same_batches_with_one_and_two_workers)
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("mode", list(MODES))
def test_checkpoint_mid_epoch_resumes_exactly(store, table, mode, workers):
    cfg = config(source(store, table, workers), mode, workers=workers, num_epochs=2)
    first, it = take(build(cfg), 7)
    state = it.get_state()
    expected, _ = take(it, 12)
    close(it)
    fresh = iter(build(cfg))
    fresh.set_state(state)
    got, _ = take(fresh, 12)
    close(fresh)
    assert_same(expected, got)


def _one_mode_each(pairs: list[tuple[int, int]], modes: list[str]) -> list:
    """Every (mode, pair) as a case; make test runs the diagonal, each pair once and each mode once (5-12 s a
    case on 2 cores with workers), make test-all (``slow``) the rest."""
    return [
        pytest.param(mode, *pair, marks=() if i == j else pytest.mark.slow)
        for i, mode in enumerate(modes)
        for j, pair in enumerate(pairs)
    ]


@pytest.mark.parametrize(
    "mode, saved, restored", _one_mode_each([(2, 1), (2, 0), (0, 2)], ["planned", "bucketing", "streaming"])
)
def test_checkpoint_restores_with_another_worker_count(store, table, mode, saved, restored):
    """Across worker counts, and between the store's one reader and a table read in workers."""
    first, it = take(build(config(source(store, table, saved), mode, workers=saved, num_epochs=2)), 9)
    state = it.get_state()
    expected, _ = take(it, 10)
    close(it)
    fresh = iter(build(config(source(store, table, restored), mode, workers=restored, num_epochs=2)))
    fresh.set_state(state)
    got, _ = take(fresh, 10)
    close(fresh)
    assert_same(expected, got)


def test_epochs_differ_and_cover(store):
    cfg = config(store, "planned", num_epochs=2, format="datatools", drop_remainder=False)
    batches = list(build(cfg))
    half = len(batches) // 2
    e0 = np.concatenate([b["tokens"] for b in batches[:half]])
    e1 = np.concatenate([b["tokens"] for b in batches[half:]])
    assert e0.shape == e1.shape
    assert not np.array_equal(e0, e1)  # reshuffled
    np.testing.assert_array_equal(np.sort(e0, axis=None), np.sort(e1, axis=None))  # same rows


@pytest.mark.parametrize("mode", list(MODES))
def test_host_shards_are_slices_of_the_global_batch(store, mode):
    """batch_size is global: host h of 2 gets rows [h * B/2, (h + 1) * B/2) of every batch one host builds."""
    whole = list(build(config(store, mode, format="datatools", drop_remainder=False)))
    hosts = [
        list(build(config(store, mode, shard={"index": h, "count": 2}, format="datatools", drop_remainder=False)))
        for h in range(2)
    ]
    assert len(hosts[0]) == len(hosts[1]) == len(whole) > 10
    for j, batch in enumerate(whole):
        for k in batch:
            np.testing.assert_array_equal(np.concatenate([hosts[0][j][k], hosts[1][j][k]]), batch[k], err_msg=k)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"source": {"path": "x"}, "packing": {"ctx": 8}, "shufle": {}}, "unknown key 'shufle' at the top level"),
        (
            {"source": {"path": "x"}, "packing": {"ctx": 8}, "shuffle": {"kind": "blok"}},
            "shuffle.kind must be one of 'none', 'full', 'block'; got 'blok'",
        ),
        ({"source": {"path": "x"}, "packing": {"ctx": 0}}, "packing.ctx must be >= 1; got 0"),
        ({"source": {"path": "x"}, "packing": {"ctx": "big"}}, "packing.ctx must be an integer; got 'big'"),
        ({"source": {"path": "x"}}, "exactly one of 'packing' and 'bucketing'"),
        ({"source": {"path": "x"}, "packing": {"ctx": 8}, "bucketing": {}}, "exactly one of"),
        ({"packing": {"ctx": 8}}, "missing required key 'source'"),
        (
            {"source": {"path": "x"}, "packing": {"ctx": 8, "algorithm": "worst_fit"}},
            "packing.algorithm must be one of",
        ),
        ({"source": {"path": "x"}, "packing": {"ctx": 10, "align": 4}}, "packing.align=4 must divide packing.ctx=10"),
        ({"source": {"path": "x"}, "packing": {"ctx": 8}, "format": "tfds"}, "format must be one of"),
        (
            {"source": {"path": "x"}, "packing": {"ctx": 8}, "shard": {"index": 2, "count": 2}},
            "shard.index=2 must be <",
        ),
    ],
)
def test_config_validation_names_the_key(data, message):
    with pytest.raises(ValueError) as exc:
        parse_config(data)
    assert message in str(exc.value)


def test_cli_pipeline_json_and_errors(store, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("source: {path: nowhere}\npacking: {ctx: 512}\nbatch_size: 4\n")
    assert main(["pipeline", str(cfg), "--source", str(store), "--steps", "20", "--json", "-"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert report["batches"] == 20
    assert report["shapes"] == [[4, 512]]
    assert 0.9 < report["efficiency"] <= 1.0
    for key in ("batches_per_s", "tokens_per_s", "efficiency", "shapes"):
        assert key in report
    assert main(["pipeline", str(cfg), "--steps", "5"]) == 2
    err = without_progress(capsys.readouterr().err).strip()  # a slow start may print a progress line first
    assert err.count("\n") == 0 and "nowhere: no such file or directory" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("source: {path: x}\npacking: {ctx: 8, mode: fast}\n")
    assert main(["pipeline", str(bad), "--steps", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "packing.mode must be one of 'planned', 'streaming'; got 'fast'" in err and "\n" not in err
    (tmp_path / "list.yaml").write_text("- 1\n")
    assert main(["pipeline", str(tmp_path / "list.yaml"), "--steps", "1"]) == 2
    assert "must be a YAML mapping" in capsys.readouterr().err


def test_shipped_configs_run_after_the_demo(tmp_path, monkeypatch, capsys):
    from datatools.jobs.demo_data import build_demo

    monkeypatch.chdir(tmp_path)
    build_demo("demo_data", limit_files=60, vocab_size=600, progress=False)
    configs = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
    assert len(configs) >= 3
    for path in configs:
        cfg = load_config(path)
        paths = [s.path for s in cfg.sources] if cfg.sources else [cfg.source.path]  # a mixture: every source
        assert "demo_data/store" in paths and all(p.startswith("demo_data/") for p in paths), path
        assert main(["pipeline", str(path), "--steps", "3", "--workers", "0", "--json", "-"]) == 0, path
        report = json.loads(capsys.readouterr().out)
        assert report["batches"] >= 1
    # --source overrides: a Parquet source with a token column
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = random_docs(200, seed=3)
    pq.write_table(pa.table({"input_ids": [d.tolist() for d in docs]}), tmp_path / "t.parquet")
    assert (
        main(["pipeline", str(configs[0]), "--source", str(tmp_path / "t.parquet"), "--steps", "2", "--json", "-"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["documents"] == 200
    shutil.rmtree(tmp_path / "demo_data")


ATTENTION_BLOCK = {"planned": 128, "streaming": 128, "bucketing": 64}  # divides every row length of the mode


@pytest.mark.parametrize("mode", list(MODES))
def test_the_loader_lists_attention_tiles(store, mode):
    from datatools.kernels.attention_blocks import block_pairs, tile_list

    block = ATTENTION_BLOCK[mode]
    batches, _ = take(build(config(store, mode, attention_block=block, format="datatools")), 4)
    for b in batches:
        want = {**block_pairs(b["segment_ids"], block), **tile_list(b["segment_ids"], block)}
        for key in want:
            np.testing.assert_array_equal(b[key], want[key], err_msg=key)
    with pytest.raises(ValueError, match="attention_block=96 must divide every row length"):
        build(config(store, mode, attention_block=96, format="datatools"))


@pytest.mark.parametrize(  # the workers' part does not depend on the mode: make test runs bucketing's (its shapes vary)
    "mode", [pytest.param(m, marks=() if m == "bucketing" else pytest.mark.slow) for m in MODES]
)
def test_attention_tiles_are_computed_in_the_workers(store, table, mode, monkeypatch):
    """With workers the tiles are computed in Grain's worker processes: this process never runs the transform
    (its ``map`` is counted here, in this process only; spawned workers import the module as it is). The batches
    and tiles equal those of workers=0, and a state saved with 2 workers resumes exactly with 0."""
    from datatools.grain.attention_blocks import AttentionBlocks
    from datatools.kernels.attention_blocks import TILE_KEYS

    calls = []
    original = AttentionBlocks.map
    monkeypatch.setattr(AttentionBlocks, "map", lambda self, element: calls.append(1) or original(self, element))
    cfg = config(store, mode, attention_block=ATTENTION_BLOCK[mode], format="datatools")
    one = list(build(cfg.replace(workers=0)))
    assert len(one) > 10 and len(calls) == len(one)  # in process: once per batch, here
    assert all(set(TILE_KEYS) <= set(b) for b in one)
    calls.clear()
    it = iter(build(config(table, mode, attention_block=ATTENTION_BLOCK[mode], format="datatools", workers=2)))
    first, _ = take(it, 5)
    state = it.get_state()
    rest = list(it)
    close(it)
    assert calls == []  # the workers computed every batch's tiles
    assert_same(one, first + rest)
    fresh = iter(build(cfg.replace(workers=0)))
    fresh.set_state(state)
    assert_same(rest, list(fresh))


def test_attention_tiles_in_a_format_without_them_are_refused():
    """The maxtext / levanter / hf layouts have no tile keys: asking for tiles there must not silently drop them."""
    from datatools.pipeline import parse_config

    cfg = {"source": {"path": "x"}, "packing": {"ctx": 256}, "batch_size": 2, "attention_block": 128}
    assert parse_config({**cfg, "format": "datatools"}).attention_block == 128
    for fmt in ("maxtext", "levanter", "hf"):
        with pytest.raises(ValueError, match="datatools format only"):
            parse_config({**cfg, "format": fmt})


@pytest.mark.parametrize("mode", ["planned", "streaming"])
def test_balanced_batches_through_the_one_reader(store, table, mode):
    """devices: 4 read by the store's one reader (read-ahead of each batch's pieces) equals the table read in this
    process, and holds the rows of the unbalanced batches."""
    one = list(build(config(store, mode, devices=4, format="datatools")))
    assert_same(one, list(build(config(table, mode, devices=4, format="datatools"))))
    drawn = list(build(config(store, mode, format="datatools")))
    assert len(one) == len(drawn) > 10
    for a, b in zip(drawn, one):
        assert sorted(map(bytes, a["tokens"])) == sorted(map(bytes, b["tokens"]))
    assert any(not np.array_equal(a["tokens"], b["tokens"]) for a, b in zip(drawn, one))
