"""What each read order puts in a batch after packing (datatools.pipeline.packed_mix) and its figures
(datatools.analysis.shuffle_quality.packed_mix_stats), and shuffle-report's --packed-batches."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.analysis.shuffle_quality import packed_mix_stats
from datatools.cli import main
from datatools.io.sources.documents import ArrayDocuments
from datatools.pipeline import parse_config
from datatools.pipeline.packed_mix import ORDERS, order_config, packed_mix
from tests.conftest import write_test_store

GROUPS, GROUP_SIZE = 4, 150  # a corpus stored grouped by source: 4 sources of 150 documents one after another


def grouped_documents(seed: int = 0) -> ArrayDocuments:
    """600 documents of 20-400 tokens, each source's documents of its own typical length (as real sources are)."""
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([rng.integers(20 + 60 * g, 140 + 80 * g, GROUP_SIZE) for g in range(GROUPS)])
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    return ArrayDocuments(np.ones(int(offsets[-1]), np.int32), offsets)


def config(seed: int = 0):
    return parse_config(
        {
            "source": {"path": "grouped"},
            "shuffle": {"kind": "block", "io_block_size": 4, "window_blocks": 8},
            "packing": {"mode": "streaming", "ctx": 128, "window": 16},
            "batch_size": 8,
            "num_epochs": None,
            "seed": seed,
        }
    )


def test_one_group_and_the_corpus_mix_by_hand():
    q = np.array([0.5, 0.3, 0.2])
    one = packed_mix_stats([(np.array([0, 1]), np.array([1, 1]), np.array([10, 30]))], q)
    assert one.mix_distance == pytest.approx(1 - 0.3) and one.mix_kl == pytest.approx(-np.log(0.3))
    assert one.documents_per_batch == 2 and one.groups_per_batch == 1
    exact = packed_mix_stats([(np.array([4, 5, 6, 4]), np.array([0, 1, 2, 0]), np.array([20, 30, 20, 30]))], q)
    assert exact.mix_distance == pytest.approx(0) and exact.mix_kl == pytest.approx(0)
    assert exact.documents_per_batch == 3 and exact.groups_per_batch == 3


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(st.integers(0, 5), min_size=1, max_size=30),
    weights=st.lists(st.integers(1, 100), min_size=6, max_size=6),
    data=st.data(),
)
def test_mix_distance_is_the_total_variation(groups, weights, data):
    """Against the dense definition 0.5 * sum over all groups |p - q| (absent groups: p = 0), and KL >= 0."""
    q = np.asarray(weights, float) / sum(weights)
    tokens = np.asarray(data.draw(st.lists(st.integers(1, 500), min_size=len(groups), max_size=len(groups))))
    g = np.asarray(groups)
    s = packed_mix_stats([(np.arange(g.size), g, tokens)], q)
    p = np.bincount(g, weights=tokens, minlength=6) / tokens.sum()
    assert s.mix_distance == pytest.approx(0.5 * np.abs(p - q).sum(), abs=1e-12)
    assert 0 <= s.mix_distance <= 1 and s.mix_kl >= -1e-12


def test_a_sorted_order_mixes_worse_than_a_shuffled_one():
    """Read in storage order, a store grouped by source gives batches of one source: the mix distance is far above
    a full shuffle's and lanes'; each order reads every document it packs (distinct documents counted)."""
    docs = grouped_documents()
    for seed in range(3):
        r = packed_mix(config(seed), group_size=GROUP_SIZE, batches=60, documents=docs)
        assert list(r) == list(ORDERS)
        none, full, block, lanes = (r[k] for k in ORDERS)
        assert none.groups_per_batch < 1.2 < 2 < full.groups_per_batch
        assert none.mix_distance > 0.6 > 0.35 > max(full.mix_distance, lanes.mix_distance)
        assert none.mix_distance > block.mix_distance
        assert lanes.documents_per_batch > full.documents_per_batch  # each row from its own lane


def test_groups_of_a_write_shuffled_store_are_counted_in_the_input_order():
    """A store written with --shuffle-seed holds the input's groups scattered: even its storage order mixes them
    (counted through the write order), while the same positions taken as the input's read as sorted."""
    docs = grouped_documents()
    plain = packed_mix(config(), group_size=GROUP_SIZE, batches=60, documents=docs)
    written = packed_mix(config(), group_size=GROUP_SIZE, batches=60, documents=docs, write_seed=5)
    assert written["none"].mix_distance < 0.5 * plain["none"].mix_distance
    assert written["none"].mix_distance < 0.35


def test_order_config_keeps_the_packing_and_sets_the_order():
    cfg = config(seed=7)
    lanes = order_config(cfg, "lanes", io_block_size=2, window_blocks=3)
    assert (lanes.shuffle.kind, lanes.shuffle.io_block_size, lanes.packing.read_order) == ("block", 2, "lanes")
    assert (lanes.packing.ctx, lanes.packing.window, lanes.batch_size, lanes.seed) == (128, 16, 8, 7)
    assert order_config(cfg, "full", io_block_size=2, window_blocks=3).packing.read_order == "window"
    with pytest.raises(ValueError, match="streaming"):
        order_config(
            cfg.replace(packing=parse_config({"source": {"path": "x"}, "packing": {"ctx": 8}}).packing),
            "none",
            io_block_size=1,
            window_blocks=1,
        )


def test_shuffle_report_packed_batches_table_and_json(tmp_path, capsys):
    docs = grouped_documents()
    store = write_test_store(
        tmp_path / "store",
        [np.ones(int(n), np.int32) for n in np.diff(docs.offsets)],
        vocab_size=1024,
    )
    path = tmp_path / "p.yaml"
    path.write_text(
        f"source: {{path: {store}}}\nshuffle: {{kind: block, io_block_size: 4, window_blocks: 8}}\n"
        "packing: {mode: streaming, ctx: 128, window: 16}\nbatch_size: 8\nnum_epochs: null\n"
    )
    args = ["--store", str(store), "--io-block-size", "4", "--window-blocks", "8", "--group-size", "150"]
    args += ["--batch-size", "8", "--config", str(path), "--packed-batches", "40"]
    assert main(["shuffle-report", *args, "--json", str(tmp_path / "r.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "after packing: 40 global batches" in out and "mix distance" in out
    packed = json.loads((tmp_path / "r.json").read_text())["packed"]
    assert list(packed) == list(ORDERS) and packed["none"]["mix_distance"] > packed["full"]["mix_distance"]
    assert main(["shuffle-report", *args[:-4]]) == 0  # no --config: no after-packing table
    assert "after packing" not in capsys.readouterr().out
    assert main(["shuffle-report", *args[:-4], "--packed-batches", "5"]) == 2
    assert "give --config" in capsys.readouterr().err
