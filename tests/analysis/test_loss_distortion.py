"""The loss-weight distortion view, by property: it matches the definition computed row by row from the plan, the
reference-weighted mean of relative weights is 1, and one document per full row is no distortion."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.analysis.loss_distortion import loss_distortion, relative_weights, sample_documents
from datatools.kernels.packing import pack_lengths

lengths_st = st.lists(st.integers(0, 300), min_size=1, max_size=60).map(lambda x: np.array(x, np.int64))


def by_definition(lengths, ctx, batch_size, seed):
    """Row by row from the plan: per-row mean (each row weighs 1) and per-batch mean (each batch weighs 1)."""
    plan = pack_lengths(lengths, ctx, overflow="split")
    rows = [plan.row(r) for r in range(plan.num_rows)]
    order = np.random.default_rng(seed).permutation(plan.num_rows)
    batch_of = {int(r): i // batch_size for i, r in enumerate(order)}
    row_t = [sum(max(n - 1, 0) for _, _, n in row) for row in rows]
    batch_t = {}
    for r, t in enumerate(row_t):
        batch_t[batch_of[r]] = batch_t.get(batch_of[r], 0) + t
    n = len(lengths)
    w_row, w_batch, pieces, tokens = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    for r, row in enumerate(rows):
        for d, _, length in row:
            t = max(length - 1, 0)
            w_row[d] += t / row_t[r] if row_t[r] else 0
            w_batch[d] += t / batch_t[batch_of[r]] if batch_t[batch_of[r]] else 0
            pieces[d] += t > 0
            tokens[d] += t

    def rel(w, ref):
        out = np.full(n, np.nan)
        k = ref > 0
        out[k] = (w[k] / w.sum()) / (ref[k] / ref.sum())
        return out

    return rel(w_row, pieces), rel(w_batch, tokens)


@settings(max_examples=80, deadline=None)
@given(lengths_st, st.integers(1, 128), st.integers(1, 5), st.integers(0, 3))
def test_matches_the_definition(lengths, ctx, batch_size, seed):
    row, batch, _ = relative_weights(lengths, ctx, batch_size=batch_size, seed=seed)
    want_row, want_batch = by_definition(lengths, ctx, batch_size, seed)
    np.testing.assert_allclose(row, want_row, rtol=1e-9, equal_nan=True)
    np.testing.assert_allclose(batch, want_batch, rtol=1e-9, equal_nan=True)


@settings(max_examples=80, deadline=None)
@given(lengths_st, st.integers(2, 128), st.integers(1, 5))
def test_reference_weighted_mean_is_one(lengths, ctx, batch_size):
    """Shares sum to 1 under both objectives, so the relative weights average to 1 under the reference shares."""
    row, batch, _ = relative_weights(lengths, ctx, batch_size=batch_size)
    targets = np.array([sum(max(min(ctx, n - k) - 1, 0) for k in range(0, n, ctx)) for n in lengths], float)
    pieces = np.array([sum(min(ctx, n - k) > 1 for k in range(0, n, ctx)) for n in lengths], float)
    if targets.sum():
        np.testing.assert_allclose(np.nansum(row * pieces / pieces.sum()), 1.0, rtol=1e-9)
        np.testing.assert_allclose(np.nansum(batch * targets / targets.sum()), 1.0, rtol=1e-9)


def test_one_document_per_full_row_is_no_distortion():
    report = loss_distortion(np.full(64, 256), 256, batch_size=8)
    for view in (report.row_mean, report.batch_mean):
        assert view.over_2x == view.under_half == 0 and view.documents == 64
        np.testing.assert_allclose([view.min, view.max], 1.0)


def test_short_documents_packed_with_long_ones_are_under_weighted_by_a_row_mean():
    """A 10-token document sharing a row with a 1000-token one gets ~1% of the row under a per-row mean."""
    lengths = np.array([1000, 10] * 50 + [1010] * 50)
    report = loss_distortion(lengths, 1010, batch_size=4)
    assert report.row_mean.under_half >= 1 / 3  # the short ones
    assert report.row_mean.quantiles["p1"] < 0.05
    assert report.to_json()  # JSON-ready


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="batch_size"):
        loss_distortion([5, 6], 8, batch_size=0)
    with pytest.raises(ValueError, match="ctx"):
        loss_distortion([5, 6], 0)


def test_analyze_padding_prints_the_view_and_writes_it_to_json(tmp_path, capsys):
    """The CLI's table section and ``--json`` key agree with the analysis run on the same lengths."""
    import json

    from conftest import random_docs, write_test_store
    from datatools.cli import main

    docs = random_docs(400, seed=4, max_len=3000)
    store = write_test_store(tmp_path / "store", docs)
    assert main(["analyze-padding", str(store), "--ctx", "1024", "--batch-size", "4"]) == 0
    assert "loss weight distortion at ctx 1,024" in capsys.readouterr().out
    assert main(["analyze-padding", str(store), "--ctx", "1024", "--batch-size", "4", "--json", "-"]) == 0
    got = json.loads(capsys.readouterr().out)["loss_distortion"]
    want = loss_distortion(np.array([len(d) for d in docs]), 1024, batch_size=4).as_dict()
    assert got == want
    assert main(["analyze-padding", str(store), "--batch-size", "0"]) == 2


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 900), min_size=1, max_size=400),
    limit=st.integers(1, 200),
    block=st.integers(1, 40),
    seed=st.integers(0, 3),
)
def test_a_large_input_is_viewed_on_a_sample_of_whole_blocks_and_says_so(lengths, limit, block, seed):
    """Over max_documents the view is the one of a seeded sample of whole blocks of consecutive documents, in
    input order, of at most max_documents (at least one block); the report names how many of how many, and
    how chosen. At or under the limit: every document, selection 'all'."""
    arr = np.array(lengths, np.int64)
    view = loss_distortion(arr, 512, batch_size=4, seed=seed, max_documents=limit, block=block)
    sample, how = sample_documents(arr, limit, seed=seed, block=block)
    assert (view.documents_total, view.documents_analyzed, view.selection) == (arr.size, sample.size, how)
    if arr.size <= limit:
        assert how == "all" and np.array_equal(sample, arr)
    else:
        assert how.startswith("random") and f"seed {seed}" in how
        assert 0 < sample.size <= max(limit, block) and sample.size <= arr.size
        starts = np.arange(0, arr.size, block)
        blocks = {tuple(arr[s : s + block]) for s in starts}
        at = 0
        while at < sample.size:  # the sample is whole blocks, back to back
            piece = next(p for p in blocks if tuple(sample[at : at + len(p)]) == p and len(p))
            at += len(piece)
    want = loss_distortion(sample, 512, batch_size=4, seed=seed, max_documents=max(sample.size, 1))
    assert repr((view.row_mean, view.batch_mean, view.rows)) == repr((want.row_mean, want.batch_mean, want.rows))
