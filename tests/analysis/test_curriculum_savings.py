"""What a curriculum saves against fixed-ctx packing: counts equal to the batches built, the issue's figures on a
lognormal (mean ~800) and a heavy-tailed length distribution, the view in analyze-padding."""

from __future__ import annotations

import json

import numpy as np
import pytest

from datatools.analysis.curriculum import curriculum_savings
from datatools.cli import main
from datatools.kernels.curriculum import attention_work, curriculum_rows
from datatools.kernels.packing import pack_lengths

SIZES = [1024, 2048, 4096, 8192]


def lognormal(n=60_000, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.lognormal(np.log(800) - 0.5, 1.0, n)), 1, 8192).astype(np.int64)


def heavy_tailed(n=60_000, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(np.round(200 * (rng.pareto(1.1, n) + 1)), 1, 8192).astype(np.int64)


def test_counts_are_those_of_the_rows():
    lengths = lognormal(5000, seed=2)
    s = curriculum_savings(lengths, [256, 512, 1024], 4096, block=128)
    rows = curriculum_rows(lengths, [256, 512, 1024], 4096)
    assert s.tokens == int(lengths.sum()) and s.batches == rows.batches.tolist()
    per_row = [(n // 128) * (n // 128 + 1) // 2 * 128 * 128 for n in (256, 512, 1024)]
    assert s.curriculum_causal_pairs == int((rows.batches * rows.rows_per_batch * per_row).sum())
    assert s.curriculum_pairs == sum(attention_work(p, 128)["pairs"] for p in rows.plans)
    fixed = pack_lengths(lengths, 1024, algorithm="best_fit_decreasing")
    work = attention_work(fixed, 128)
    assert s.fixed_causal_pairs == work["causal_tiles"] * 128 * 128 and s.fixed_rows == fixed.num_rows
    assert s.fixed_document_tile_pairs == work["document_tiles"] * 128 * 128
    # in-document pairs: a segment-aware ideal, never more than the tiles that hold them
    assert s.fixed_pairs <= s.fixed_document_tile_pairs <= s.fixed_causal_pairs
    assert s.curriculum_pairs <= s.curriculum_causal_pairs
    with pytest.raises(ValueError, match="block=100 must divide every length and ctx; 256 is not a multiple"):
        curriculum_savings(lengths, [256, 512], 4096, block=100)


@pytest.mark.parametrize("lengths", [lognormal(), heavy_tailed()], ids=["lognormal", "heavy_tailed"])
def test_grow_p2_halves_attention_against_every_causal_tile(lengths):
    """The issue's figure: one epoch, max length 8192, fixed-ctx 8192 packing of the same tokens computed over
    every causal tile costs at least 2x the curriculum's batches; padding stays under 1% of slots."""
    s = curriculum_savings(lengths, SIZES, 65536, block=128)
    assert s.vs_causal >= 2.0
    assert s.curriculum_padding < 0.01
    assert 0 < s.vs_block_sparse < s.vs_causal  # block-sparse at fixed ctx skips the cross-document tiles too
    grow, mix = (w.done_at for w in s.schedules)
    assert grow["50%"] < mix["50%"]  # short first: half the steps do less than half the attention work


def test_analyze_padding_shows_the_curriculum(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "lengths.npy", lognormal(4000, seed=5))
    args = ["analyze-padding", str(tmp_path / "d"), "--ctx", "2048", "--curriculum", "256,512,1024,2048"]
    assert main([*args, "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)["curriculum"]
    assert report["lengths"] == [256, 512, 1024, 2048] and report["tokens_per_batch"] == 8 * 2048
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "length curriculum [256, 512, 1,024, 2,048]" in out and "every causal tile (splash, cuDNN, flash)" in out
    assert main(["analyze-padding", str(tmp_path / "d"), "--curriculum", "256,x"]) == 2
    assert "'256,x' is not a comma list of lengths" in capsys.readouterr().err
    assert main(["analyze-padding", str(tmp_path / "d"), "--curriculum", "256,384", "--tokens-per-batch", "1000"]) == 2
    assert "tokens_per_batch=1000 must be a positive multiple of every length" in capsys.readouterr().err
