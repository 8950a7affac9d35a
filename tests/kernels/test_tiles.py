"""tile_align, choose_context, fit_resolution, chunk."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools import choose_context, chunk, fit_resolution, tile_align


def test_tile_align():
    assert tile_align(4600, 256) == 4608 and tile_align(4608, 256) == 4608 and tile_align(0, 128) == 0
    np.testing.assert_array_equal(tile_align(np.array([1, 128, 129]), 128), [128, 128, 256])
    with pytest.raises(ValueError):
        tile_align(5, 0)
    with pytest.raises(ValueError):
        tile_align(-1, 8)


def test_fit_resolution_example_from_the_field():
    # a patch tokenizer: 108 preamble tokens + 20 per patch, P x P patches
    assert fit_resolution(lambda p: 108 + 20 * p * p, 4608, tile=256) == (15, 4608)
    assert fit_resolution(lambda p: 108 + 20 * p * p, 8192, tile=256) == (20, 8192)
    assert fit_resolution(lambda p: 108 + 20 * p * p, 8192, tile=256, high=12) == (12, tile_align(108 + 2880, 256))
    with pytest.raises(ValueError, match="does not fit"):
        fit_resolution(lambda p: 10_000, 4608, tile=256)


@settings(max_examples=60, deadline=None)
@given(
    a=st.integers(0, 500), b=st.integers(1, 50), max_ctx=st.integers(1, 20_000), tile=st.sampled_from([1, 64, 128, 256])
)
def test_fit_resolution_is_the_largest(a, b, max_ctx, tile):
    fn = lambda p: a + b * p  # noqa: E731
    if tile_align(fn(1), tile) > max_ctx:
        with pytest.raises(ValueError):
            fit_resolution(fn, max_ctx, tile=tile)
        return
    p, ctx = fit_resolution(fn, max_ctx, tile=tile)
    assert ctx == tile_align(fn(p), tile) <= max_ctx and ctx % tile == 0
    assert tile_align(fn(p + 1), tile) > max_ctx


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(0, 2000),
    tiles=st.integers(1, 8),
    tile=st.sampled_from([1, 16, 128]),
    bos=st.booleans(),
    eos=st.booleans(),
)
def test_chunk_loses_and_duplicates_nothing(n, tiles, tile, bos, eos):
    doc = np.arange(10, 10 + n, dtype=np.int32)
    ctx = tiles * tile
    windows = chunk(doc, ctx, tile=tile, bos=1 if bos else None, eos=2 if eos else None)
    expected = np.concatenate([[1]] * bos + [doc] + [[2]] * eos).astype(np.int32) if (n or bos or eos) else doc
    got = np.concatenate(windows) if windows else np.zeros(0, np.int32)
    np.testing.assert_array_equal(got, expected)
    assert all(len(w) == ctx for w in windows[:-1]) and all(0 < len(w) <= ctx for w in windows)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), ctx_tiles=st.integers(1, 8), stride_frac=st.floats(0.1, 1.0))
def test_chunk_with_stride_covers_everything(n, ctx_tiles, stride_frac):
    doc = np.arange(n)
    ctx = ctx_tiles * 64
    stride = max(1, int(ctx * stride_frac))
    windows = chunk(doc, ctx, tile=64, stride=stride)
    covered = np.zeros(n, bool)
    for w in windows:
        assert len(w) <= ctx and np.all(np.diff(w) == 1)
        covered[w] = True
    assert covered.all() and windows[-1][-1] == n - 1


def test_chunk_errors():
    with pytest.raises(ValueError, match="not a multiple of tile"):
        chunk(np.arange(10), 100, tile=64)
    with pytest.raises(ValueError, match="skip"):
        chunk(np.arange(10), 64, tile=64, stride=65)


def test_choose_context_ranks_by_useful_fraction():
    rng = np.random.default_rng(0)
    lengths = rng.lognormal(np.log(400), 1.0, size=5000).round().clip(1, 8192).astype(int)
    ranked = choose_context(lengths, tile=256, max_ctx=4608)
    assert all(r["ctx"] % 256 == 0 and r["ctx"] <= 4608 for r in ranked)
    assert len(ranked) == 18
    effs = [r["packed_efficiency"] for r in ranked]
    assert effs == sorted(effs, reverse=True)
    top = next(r for r in ranked if r["ctx"] == 4608)
    assert top["relative_activation_memory"] == 1.0
    assert all(r["padded_efficiency"] <= r["packed_efficiency"] + 1e-12 for r in ranked)
    with pytest.raises(ValueError):
        choose_context(lengths, tile=256, max_ctx=100)


# --------------------------------------------------------------------------- issue 21 defect 6: bad arguments


@pytest.mark.parametrize("kwargs", [{"bos": -1}, {"eos": -1}, {"bos": 2**31}, {"eos": 2**40}])
def test_chunk_refuses_special_ids_outside_the_id_range(kwargs):
    with pytest.raises(ValueError, match=str(next(iter(kwargs.values())))):
        chunk(np.arange(10, dtype=np.int32), 4, tile=1, **kwargs)


@pytest.mark.parametrize("kwargs", [{"bos": 1.5}, {"eos": True}, {"bos": "1"}])
def test_chunk_refuses_special_ids_that_are_not_integers(kwargs):
    with pytest.raises(TypeError):
        chunk(np.arange(10, dtype=np.int32), 4, tile=1, **kwargs)


@pytest.mark.parametrize(
    "tokens", [np.arange(10, dtype=np.float64), np.ones(10, bool), np.array(["a", "b"]), [0.5, 1.5]]
)
def test_chunk_refuses_tokens_that_are_not_integers(tokens):
    with pytest.raises(TypeError, match="integer"):
        chunk(tokens, 4, tile=1)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 200), at=st.integers(0, 199), bad=st.integers(-(2**40), -1))
def test_chunk_refuses_a_negative_token_id(n, at, bad):
    tokens = np.arange(n, dtype=np.int64)
    tokens[at % n] = bad
    with pytest.raises(ValueError, match=str(bad)):
        chunk(tokens, 8, tile=1)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 300),
    ctx=st.sampled_from([1, 4, 64]),
    bos=st.sampled_from([None, 0, 7]),
    eos=st.sampled_from([None, 1, 2**31 - 1]),
    dtype=st.sampled_from([np.uint16, np.int32, np.int64, np.uint32]),
)
def test_chunk_keeps_the_integer_dtype_and_the_ids(n, ctx, bos, eos, dtype):
    tokens = (np.arange(n) % 60000).astype(dtype)
    windows = chunk(tokens, ctx, tile=1, bos=bos, eos=eos)
    got = np.concatenate(windows) if windows else np.zeros(0, np.int64)
    want = [*([bos] if bos is not None else []), *tokens.tolist(), *([eos] if eos is not None else [])]
    assert got.tolist() == want
    assert all(w.dtype.kind in "iu" for w in windows)
