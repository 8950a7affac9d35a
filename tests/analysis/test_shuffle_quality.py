"""shuffle_report figures and the `datatools shuffle-report` command."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.analysis.shuffle_quality import expected_distinct_groups, order_stats, shuffle_report
from datatools.cli import main
from datatools.kernels.shuffle import lane_order


@pytest.mark.parametrize("n, m, s", [(1000, 10, 20), (1030, 64, 128), (500, 7, 5)])
def test_expected_distinct_groups_matches_simulation(n, m, s):
    rng = np.random.default_rng(0)
    draws = np.array([np.unique(rng.choice(n, size=s, replace=False) // m).size for _ in range(4000)])
    assert expected_distinct_groups(n, m, s) == pytest.approx(draws.mean(), rel=0.01)


def test_order_stats_on_storage_order():
    stats = order_stats(np.arange(1024), group_size=64, batch_size=128, io_block_size=64, window_blocks=4)
    assert stats.groups_per_batch == 2 and stats.runs_per_batch == 1
    assert stats.block_reads_per_batch == 2 and stats.mean_displacement == 0


def test_order_stats_runs_and_reads_by_hand():
    order = np.array([0, 1, 5, 6, 2, 3, 4, 7])  # batches of 4: {0,1,5,6} -> 2 runs; {2,3,4,7} -> 2 runs
    stats = order_stats(order, group_size=2, batch_size=4, io_block_size=2, window_blocks=1)
    assert stats.runs_per_batch == 2
    # blocks touched: 0,0,2,3 | 1,1,2,3 with a one-block cache -> reads 3 then 3
    assert stats.block_reads_per_batch == 3
    assert stats.groups_per_batch == 3


def test_block_shuffle_mixes_like_a_full_shuffle_at_sequential_cost():
    r = shuffle_report(2**18, io_block_size=64, window_blocks=1024, group_size=64, batch_size=128, seed=3)
    none, full, block = (r.orders[k] for k in ("none", "full", "block"))
    assert none.groups_per_batch == 2
    assert full.groups_per_batch == pytest.approx(r.expected_groups_per_batch, rel=0.02)
    assert block.groups_per_batch > 0.9 * r.expected_groups_per_batch
    assert block.block_reads_per_batch < 3 < 50 < full.block_reads_per_batch


def test_cli_json_to_stdout_only(capsys):
    code = main(
        [
            "shuffle-report",
            "--n",
            "8192",
            "--io-block-size",
            "64",
            "--window-blocks",
            "16",
            "--group-size",
            "64",
            "--batch-size",
            "128",
            "--json",
            "-",
        ]
    )
    assert code == 0
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert set(report["orders"]) == {"none", "full", "block", "lanes"} and "block shuffle" in out.err


def test_cli_json_file_and_table(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert (
        main(
            [
                "shuffle-report",
                "--n",
                "4096",
                "--io-block-size",
                "8",
                "--window-blocks",
                "8",
                "--group-size",
                "16",
                "--batch-size",
                "32",
                "--json",
                str(path),
            ]
        )
        == 0
    )
    assert json.loads(path.read_text())["n"] == 4096
    assert "full Feistel shuffle" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args",
    [["--n", "0"], ["--n", "100", "--batch-size", "1000"], ["--n", "abc"], ["--n", "100", "--io-block-size", "0"]],
)
def test_cli_bad_input_is_one_line_exit_2(args, capsys):
    base = {"--n": "100", "--io-block-size": "4", "--window-blocks": "4", "--group-size": "4", "--batch-size": "8"}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    argv = ["shuffle-report"] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("datatools: error:") and err.count("\n") == 1


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 3000),
    size=st.integers(1, 70),
    lanes=st.integers(1, 40),
    window=st.integers(1, 300),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 5),
)
def test_lane_order_is_a_permutation(n, size, lanes, window, seed, epoch):
    order = lane_order(n, io_block_size=size, lanes=lanes, window=window, seed=seed, epoch=epoch)
    assert np.array_equal(np.sort(order), np.arange(n))


def test_lanes_mix_more_groups_than_the_block_shuffle_at_its_block_reads():
    """The users' shape (io blocks of 64, ~1,300 documents a batch, 256 lanes of 1024-document windows): a batch
    read in lanes holds documents of more stored groups than the block shuffle's window order, and still reads
    about as many io blocks per batch as the block shuffle (each once, from a cache of every lane's window)."""
    r = shuffle_report(625_000, io_block_size=64, window_blocks=1024, group_size=64, batch_size=1300, seed=5, lanes=256)
    block, lanes = r.orders["block"], r.orders["lanes"]
    assert lanes.groups_per_batch >= block.groups_per_batch
    assert lanes.groups_per_batch > 0.8 * r.expected_groups_per_batch
    assert lanes.block_reads_per_batch <= 1.2 * block.block_reads_per_batch
    assert r.lane_cache_blocks == 256 * (16 + 2)


def test_a_store_shuffled_when_written_mixes_groups_in_storage_order():
    """Groups are consecutive in the input: over a write-shuffled store even the storage order mixes them like a
    full shuffle, while its reads stay one contiguous run a batch."""
    kw = dict(io_block_size=16, window_blocks=4, group_size=200, batch_size=64)
    plain = shuffle_report(4000, **kw)
    written = shuffle_report(4000, **kw, write_seed=5)
    expected = written.expected_groups_per_batch
    assert plain.orders["none"].groups_per_batch <= 2
    assert written.orders["none"].groups_per_batch > 0.9 * expected
    assert written.orders["none"].runs_per_batch == plain.orders["none"].runs_per_batch == 1
    assert written.orders["block"].groups_per_batch > plain.orders["block"].groups_per_batch


@pytest.mark.parametrize(
    "config, says",
    [
        (
            "block",
            "the row 'block shuffle in lanes' is its read order (shuffle.kind block, streaming packing with "
            "read_order lanes); its own sizes: --io-block-size 32 --window-blocks 64",
        ),
        ("window", "the row 'block shuffle' is its read order (shuffle.kind block, read in window order); its own"),
        ("planned", "the row 'full Feistel shuffle' is its read order (planned packing's rows mix documents"),
        ("none", "the row 'no shuffle (storage order)' is its read order (shuffle.kind none)"),
    ],
)
def test_the_report_says_which_row_a_config_reads_in(tmp_path, capsys, config, says):
    """Issue 58: shuffle-report printed its rows and left the reader to work out which one their pipeline is."""
    packing = {
        "block": "{mode: streaming, ctx: 64}",
        "window": "{mode: streaming, ctx: 64, read_order: window}",
        "planned": "{mode: planned, ctx: 64}",
        "none": "{mode: streaming, ctx: 64}",
    }[config]
    kind = {"planned": "full", "none": "none"}.get(config, "block")
    path = tmp_path / "p.yaml"
    path.write_text(
        f"source: {{path: data}}\nshuffle: {{kind: {kind}, io_block_size: 32, window_blocks: 64}}\n"
        f"packing: {packing}\nbatch_size: 4\n"
    )
    args = ["--n", "512", "--io-block-size", "8", "--window-blocks", "8", "--group-size", "16", "--batch-size", "8"]
    assert main(["shuffle-report", *args, "--config", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{path}: {says}" in out, out
    assert main(["shuffle-report", *args]) == 0
    assert "which row is your pipeline's: --config PATH says" in capsys.readouterr().out
