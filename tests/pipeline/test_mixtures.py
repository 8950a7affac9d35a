"""Mixtures of sources (``sources:``): shares by weight, ``exhaust`` epochs, exact resume across checkpoints,
workers and hosts, weight changes at a restore, config errors, and the mixing report.

Documents carry their global id in every token (token = id + 1; padding 0), so every token slot of a batch names
its document, hence its source (ids are numbered source after source)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datatools.cli import main
from datatools.grain.portable_state import host_state
from datatools.io.sources.documents import ArrayDocuments
from datatools.pipeline import build_canonical, parse_config
from datatools.pipeline.build import _build_canonical  # noqa: PLC2701  (the test builds with a given history)
from datatools.pipeline.mix_report import mix_report

MODES = {
    "streaming": {"packing": {"ctx": 128, "mode": "streaming", "window": 40}},
    "bucketing": {"bucketing": {"boundaries": [32, 64, 128]}},
}
KEYS = ("tokens", "segment_ids", "positions", "loss_mask")


def id_sources(sizes, seed=0, means=(3.0, 3.8)):
    """Sources of lognormal lengths whose document i (global, source after source) is all ``i + 1``."""
    rng = np.random.default_rng(seed)
    out, first = [], 0
    for k, n in enumerate(sizes):
        lengths = np.clip(rng.lognormal(means[k % len(means)], 0.8, n), 1, 300).astype(np.int64)
        out.append(
            ArrayDocuments(
                np.repeat(np.arange(first + 1, first + n + 1, dtype=np.int32), lengths),
                np.concatenate(([0], np.cumsum(lengths))),
            )
        )
        first += n
    return out


@pytest.fixture(scope="module")
def sources():
    return id_sources([150, 600])


def cfg(mode="streaming", weights=(3, 1), epoch="sample", hosts=1, index=0, **extra):
    return parse_config(
        {
            "sources": [{"path": f"s{k}", "weight": w} for k, w in enumerate(weights)],
            "mixture": {"epoch": epoch, **extra.pop("mixture", {})},
            **MODES[mode],
            "shuffle": {"kind": "block", "io_block_size": 4, "window_blocks": 8},
            "batch_size": 8,
            "seed": 5,
            "drop_remainder": False,
            "shard": {"index": index, "count": hosts},
            **extra,
        }
    )


def per_source(batches, sizes) -> tuple[np.ndarray, np.ndarray]:
    """(tokens per source, times each global document was delivered whole or in part, counted per token)."""
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    tokens = np.zeros(len(sizes), np.int64)
    docs = np.zeros(int(offsets[-1]), np.int64)
    for b in batches:
        doc = b["tokens"][b["segment_ids"] > 0].astype(np.int64) - 1
        tokens += np.bincount(np.searchsorted(offsets, doc, side="right") - 1, minlength=len(sizes))
        docs += np.bincount(doc, minlength=docs.shape[0])
    return tokens, docs


def delivered_tokens(batches, sources) -> np.ndarray:
    """How many times each token of each source was delivered (flat over the sources, in id order)."""
    lengths = np.concatenate([s.lengths() for s in sources])
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    count = np.zeros(int(offsets[-1]), np.int64)
    for b in batches:
        real = b["segment_ids"] > 0
        np.add.at(count, offsets[b["tokens"][real].astype(np.int64) - 1] + b["positions"][real], 1)
    return count


def assert_same(a: list[dict], b: list[dict], where: str):
    assert len(a) == len(b), f"{where}: {len(a)} batches vs {len(b)}"
    for j, (x, y) in enumerate(zip(a, b)):
        for k in KEYS:
            np.testing.assert_array_equal(x[k], y[k], err_msg=f"{where}: batch {j} {k}")


@pytest.mark.parametrize("mode", list(MODES))
def test_token_share_matches_the_weights_over_a_long_run(sources, mode):
    """Tolerance (docs/mixtures.md): over a run of many source epochs each source's token share is its weight to
    within 1% (absolute); the document interleave itself is exact to K documents in every prefix."""
    sizes = [len(s) for s in sources]
    for weights in ((3, 1), (1, 4)):
        run = list(build_canonical(cfg(mode, weights, num_epochs=12), sources).dataset)
        tokens, _ = per_source(run, sizes)
        share = tokens / tokens.sum()
        np.testing.assert_allclose(share, np.asarray(weights) / sum(weights), atol=0.01, err_msg=str(weights))


def test_document_shares_when_the_weights_are_shares_of_documents(sources):
    run = list(build_canonical(cfg("bucketing", (1, 1), num_epochs=4, mixture={"share": "documents"}), sources).dataset)
    pieces = np.zeros(2, np.int64)
    for b in run:  # one piece per row: a document counted at its first piece (offset 0)
        first = (b["segment_ids"][:, 0] > 0) & (b["positions"][:, 0] == 0)
        doc = b["tokens"][:, 0][first].astype(np.int64) - 1
        pieces += np.bincount(doc >= len(sources[0]), minlength=2)
    assert abs(pieces[0] / pieces.sum() - 0.5) < 0.01


@pytest.mark.parametrize("mode", list(MODES))
def test_exhaust_delivers_every_document_of_every_source_once_per_epoch(sources, mode):
    run = list(build_canonical(cfg(mode, (5, 1), epoch="exhaust", num_epochs=2), sources).dataset)
    one = len(list(build_canonical(cfg(mode, (5, 1), epoch="exhaust"), sources).dataset))
    for epoch in (run[:one], run[one:]):
        count = delivered_tokens(epoch, sources)
        assert count.min() == 1 and count.max() == 1  # every token of every document once: nothing lost or repeated


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 60), min_size=1, max_size=3), data=st.data())
def test_exhaust_any_sizes_and_weights(sizes, data):
    srcs = id_sources(sizes, seed=len(sizes))
    weights = data.draw(st.lists(st.floats(0.05, 20.0), min_size=len(sizes), max_size=len(sizes)))
    mode = data.draw(st.sampled_from(list(MODES)))
    run = list(build_canonical(cfg(mode, weights, epoch="exhaust"), srcs).dataset)
    count = delivered_tokens(run, srcs)
    assert count.min() == 1 and count.max() == 1


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("epoch", ["sample", "exhaust"])
def test_resume_is_exact_across_hosts(sources, mode, epoch):
    whole = list(build_canonical(cfg(mode, epoch=epoch, num_epochs=2), sources).dataset)
    k = len(whole) // 2 + 3
    two = [
        iter(build_canonical(cfg(mode, epoch=epoch, hosts=2, index=h, num_epochs=2), sources).dataset) for h in range(2)
    ]
    for _ in range(k):
        [next(it) for it in two]
    state = host_state([it.get_state() for it in two])
    it = iter(build_canonical(cfg(mode, epoch=epoch, num_epochs=2), sources).dataset)
    it.set_state(state)
    assert_same(list(it), whole[k:], f"{mode} {epoch} 2 hosts -> 1")


def test_resume_is_exact_across_worker_counts(sources):
    """A state saved with 2 Grain workers restores with 0 and with 1, and the other way round."""
    whole = list(build_canonical(cfg("streaming", num_epochs=2), sources).dataset)
    k = len(whole) // 3
    it = iter(build_canonical(cfg("streaming", num_epochs=2, workers=2), sources).dataset)
    head = [next(it) for _ in range(k)]
    state = it.get_state()
    it.close()
    assert_same(head, whole[:k], "2 workers")
    for workers in (0, 1):
        again = iter(build_canonical(cfg("streaming", num_epochs=2, workers=workers), sources).dataset)
        again.set_state(state)
        rest = list(again)
        getattr(again, "close", lambda: None)()
        assert_same(rest, whole[k:], f"2 workers -> {workers}")


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("epoch", ["sample", "exhaust"])
def test_weights_changed_at_a_restore(sources, mode, epoch):
    """The new weights hold from the restore point on; the batches before it are unchanged (the recorded history
    rebuilds them), the continuation is deterministic and restores exactly again; exhaust still delivers every
    document once in the epoch across the change."""
    old = list(build_canonical(cfg(mode, (3, 1), epoch, num_epochs=3), sources).dataset)
    k = len(old) // 4
    it = iter(build_canonical(cfg(mode, (3, 1), epoch, num_epochs=3), sources).dataset)
    for _ in range(k):
        next(it)
    state = it.get_state()
    new = iter(build_canonical(cfg(mode, (1, 3), epoch, num_epochs=3), sources).dataset)
    new.set_state(state)
    rest = list(new)
    history = new.get_state()["pipeline"]["mixture_weights"]
    assert history[0] == [0, [3.0, 1.0]] and history[1][1] == [1.0, 3.0] and len(history) == 2
    built = _build_canonical(cfg(mode, (1, 3), epoch, num_epochs=3), sources, history)
    rebuilt = list(built.dataset)
    assert_same(rebuilt[:k], old[:k], "before the restore point")
    assert_same(rebuilt[k:], rest, "after it")
    # A state saved after the change restores into the new config exactly (the history travels in the state).
    again = iter(build_canonical(cfg(mode, (1, 3), epoch, num_epochs=3), sources).dataset)
    again.set_state(state)
    for _ in range(5):
        next(again)
    later = iter(build_canonical(cfg(mode, (1, 3), epoch, num_epochs=3), sources).dataset)
    later.set_state(again.get_state())
    assert_same(list(later), rest[5:], "restored after the change")
    if epoch == "sample":  # the new weights hold over the rest of the run
        tokens, _ = per_source(rest, [len(s) for s in sources])
        assert abs(tokens[1] / tokens.sum() - 0.75) < 0.03
    else:  # the epoch of the change (old batches, then new ones) still holds every document once
        first_epoch = sum(1 for j in range(len(rebuilt)) if built.batches.locate(j)[0] == 0)
        assert first_epoch > k
        count = delivered_tokens(rebuilt[:first_epoch], sources)
        assert count.min() == 1 and count.max() == 1


def test_a_state_still_refuses_other_changes(sources):
    it = iter(build_canonical(cfg(), sources).dataset)
    next(it)
    other = iter(build_canonical(cfg(weights=(1, 1), seed=6), sources).dataset)
    with pytest.raises(ValueError, match="seed: saved 5, this pipeline 6"):
        other.set_state(it.get_state())
    with pytest.raises(ValueError, match="mixture: saved"):
        iter(build_canonical(cfg(epoch="exhaust"), sources).dataset).set_state(it.get_state())


@pytest.mark.parametrize(
    "data, message",
    [
        ({"sources": [{"path": "a", "weight": 0}]}, "sources[0].weight must be > 0; got 0.0"),
        ({"sources": [{"path": "a", "weight": -1.5}]}, "sources[0].weight must be > 0; got -1.5"),
        ({"sources": [{"path": "a", "weight": "x"}]}, "sources[0].weight must be a number"),
        ({"sources": []}, "sources must list at least one source"),
        ({"sources": [{"path": "a"}], "source": {"path": "b"}}, "exactly one of 'source' (one input) and 'sources'"),
        ({}, "missing required key 'source' (or 'sources'"),
        ({"sources": [{"path": "a/x"}, {"path": "b/x"}]}, "the label 'x' names two sources"),
        ({"sources": [{"path": "a", "wieght": 2}]}, "unknown key 'wieght' in sources[0]"),
        (
            {"sources": [{"path": "a"}], "mixture": {"epoch": "once"}},
            "mixture.epoch must be one of 'sample', 'exhaust'",
        ),
    ],
)
def test_config_errors_name_the_key(data, message):
    with pytest.raises(ValueError) as exc:
        parse_config({"packing": {"ctx": 64, "mode": "streaming"}, **data})
    assert message in str(exc.value)


def test_planned_packing_and_source_override_are_refused():
    with pytest.raises(ValueError, match="needs packing.mode: streaming or bucketing"):
        parse_config({"sources": [{"path": "a"}], "packing": {"ctx": 64}})
    with pytest.raises(ValueError, match="--source x replaces 'source'"):
        parse_config({"sources": [{"path": "a"}], "packing": {"ctx": 64, "mode": "streaming"}}, source="x")


def test_sources_are_opened_each_with_its_own_settings(tmp_path, tokenizer_file, texts):
    """A token store and a Parquet text column tokenized as read, in one mixture: each source's documents come
    through its own reader (the ids per source are those each would give alone)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from conftest import random_docs, write_test_store
    from datatools.pipeline import open_source
    from datatools.pipeline.sources import open_config_documents

    store = write_test_store(tmp_path / "store", random_docs(50, max_len=200))
    pq.write_table(pa.table({"body": texts[:20]}), tmp_path / "t.parquet")
    c = parse_config(
        {
            "sources": [
                {"path": str(store), "weight": 2},
                {
                    "path": str(tmp_path / "t.parquet"),
                    "column": "body",
                    "tokenizer": str(tokenizer_file),
                    "eos": "auto",
                    "name": "text",
                },
            ],
            "packing": {"ctx": 256, "mode": "streaming"},
            "batch_size": 2,
        }
    )
    docs = open_config_documents(c)
    assert docs.names == ["store", "text"] and docs.sizes.tolist() == [50, 20]
    alone = open_source(c.sources[1])
    np.testing.assert_array_equal(docs[50 + 3], alone[3])
    pieces = docs.read_pieces([51, 2, 60], [1, 0, 2], [5, 4, 3])
    np.testing.assert_array_equal(pieces, np.concatenate([alone[1][1:6], docs.sources[0][2][:4], alone[10][2:5]]))
    assert len(list(build_canonical(c).dataset)) > 0


def test_mix_report_figures_are_the_pipelines_own(sources):
    c = cfg("streaming", (3, 1), num_epochs=2)
    report = mix_report(c, batches=50, group_size=16, documents=sources)
    batches = list(build_canonical(c, sources).dataset)[:50]
    tokens, _ = per_source(batches, [len(s) for s in sources])
    assert report.batches == 50 and [s.name for s in report.sources] == ["s0", "s1"]
    assert [s.tokens for s in report.sources] == tokens.tolist()
    assert report.sources[0].weight == 0.75
    for s in report.sources:
        assert 0 <= s.token_share_worst_deviation <= 1 and abs(s.token_share_mean - s.weight) < 0.1
        assert s.groups_per_batch is not None and s.groups_per_batch >= 1
    assert report.groups_per_batch >= report.groups_per_batch_min >= 1


def test_mix_report_command(tmp_path, capsys):
    from conftest import random_docs, write_test_store

    a = write_test_store(tmp_path / "a", random_docs(120, seed=1, max_len=300))
    b = write_test_store(tmp_path / "b", random_docs(300, seed=2, max_len=100))
    config = tmp_path / "mix.yaml"
    config.write_text(
        f"sources:\n  - {{path: {a}, weight: 0.6}}\n  - {{path: {b}, weight: 0.4}}\n"
        f"packing: {{ctx: 256, mode: streaming, window: 64}}\nbatch_size: 4\n"
    )
    assert main(["mix-report", str(config), "--batches", "20", "--json", "-"]) == 0
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert report["batches"] == 20 and [s["name"] for s in report["sources"]] == ["a", "b"]
    assert "tokens/batch: mean" in out.err
    config.write_text(f"sources:\n  - {{path: {a}, weight: 0}}\npacking: {{ctx: 256, mode: streaming}}\n")
    assert main(["mix-report", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("datatools: error: ") and "\n" not in err and "sources[0].weight must be > 0" in err
    config.write_text(f"sources:\n  - {{path: {tmp_path / 'nowhere'}}}\npacking: {{ctx: 256, mode: streaming}}\n")
    assert main(["mix-report", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert "nowhere" in err and "\n" not in err


def test_the_shipped_mixture_config_runs(tmp_path, monkeypatch, tokenizer_file, texts):
    """configs/pretrain_mixture_8192.yaml on data the test writes in the demo's layout (a store, a Parquet text
    file and its tokenizer), by name, with the ctx and batch made small."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from conftest import random_docs, write_test_store

    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo_data").mkdir()
    write_test_store(tmp_path / "demo_data" / "store", random_docs(200, max_len=400))
    pq.write_table(pa.table({"text": texts[:30]}), tmp_path / "demo_data" / "stdlib.parquet")
    shutil.copy(tokenizer_file, tmp_path / "demo_data" / "tokenizer.json")
    common = ["--set", "packing.ctx=512", "--set", "packing.window=64"]
    assert main(["pipeline", "pretrain_mixture_8192", "--steps", "3", "--set", "workers=0", *common]) == 0
    assert main(["mix-report", "pretrain_mixture_8192", "--batches", "10", *common]) == 0
