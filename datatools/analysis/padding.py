"""Padding analysis: the length distribution, the waste of every strategy (:data:`STRATEGIES`) at each ctx, and a
recommendation, from document lengths alone (100M documents fit in memory and run in seconds).

``pad`` pads (or truncates) one document per row; ``bucket`` pads pieces to K optimal tile-aligned lengths (exact
DP); ``next_fit``, ``first_fit``, ``best_fit`` pack in input order with ``window`` open rows, as Grain's packers do
(all emitted when a piece fits none); the ``*_decreasing`` packers plan over all documents, largest first;
``concat_split`` cuts the concatenation every ctx tokens. Packers split documents longer than ctx into pieces.
Efficiency = real tokens / slots; speed-up bound = efficiency / ``pad``'s at the same ctx.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt

from datatools.analysis.attention_tiles import attention_tile_view
from datatools.analysis.padding_result import Histogram, LengthStats, PaddingReport, Recommendation, StrategyResult
from datatools.base.checks import DEFAULT_ALGORITHM, DEFAULT_CTX_CAP, as_lengths, check_int, short_repr
from datatools.kernels.bucket import optimal_boundaries
from datatools.kernels.packing.algorithms import ALGORITHMS, BY_NAME, TABLE
from datatools.kernels.packing.counting import PackCount, count_rows, count_rows_chunked
from datatools.kernels.packing.pieces import piece_histogram, piece_sizes
from datatools.kernels.tiles import tile_align

T = TypeVar("T")

STRATEGIES = ("pad", "bucket", *ALGORITHMS)
PACKERS = tuple(a.name for a in TABLE if not a.cuts_documents)  # whole pieces into rows
HISTOGRAM_BINS = 24


@dataclass(frozen=True)
class PaddingOptions:
    """The analyzer's options (tokens), validated here: ``contexts`` (sorted, merged; None: :func:`default_contexts`),
    the accelerator ``tile`` (bucket lengths and default contexts are multiples of it), K ``buckets``,
    ``max_segments`` per row (None: no cap), ``window`` open rows of the streaming packers (Grain's
    num_packing_bins), the ``strategies`` to run and the ``threads`` running them (the kernels release the GIL)."""

    contexts: tuple[int, ...] | None = None
    tile: int = 128
    buckets: int = 4
    max_segments: int | None = None
    window: int = 256
    strategies: tuple[str, ...] = STRATEGIES
    threads: int = 2

    def __post_init__(self) -> None:
        for key in ("tile", "buckets", "window", "max_segments"):
            if key != "max_segments" or self.max_segments is not None:  # None: no cap
                object.__setattr__(self, key, check_int(getattr(self, key), key, minimum=1))
        if self.contexts is not None:
            object.__setattr__(self, "contexts", tuple(sorted({check_int(c, "ctx", minimum=1) for c in self.contexts})))
        for name in self.strategies:
            if name not in STRATEGIES:
                raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {short_repr(name)}")
        object.__setattr__(self, "strategies", tuple(self.strategies))


@dataclass(frozen=True)
class LengthSummary:
    """What :func:`length_stats` counts: documents, tokens, empty documents, statistics and histogram."""

    num_sequences: int
    num_tokens: int
    empty: int
    lengths: LengthStats
    histogram: Histogram


PAD_CHUNK = 1 << 22  # lengths summed at a time by the padding statistics (32 MiB of int64 temporaries)
CHUNK = 1 << 24  # documents: an input longer than this is analyzed a slice at a time (128 MiB of int64 each)
EXACT_HISTOGRAM_MAX = 1 << 26  # tokens: up to this longest document, chunked statistics count every length


def length_stats(lengths: np.ndarray) -> LengthSummary:
    """Documents, tokens, min / max / mean and p50 / p90 / p99 (tokens), and a log-spaced histogram."""
    n = int(lengths.shape[0])
    if n == 0:
        raise ValueError("no documents to analyze")
    total = int(lengths.sum())
    p50, p90, p99 = (float(x) for x in np.percentile(lengths, [50, 90, 99]))
    edges = _log_edges(int(lengths.max()))
    counts, _ = np.histogram(lengths, bins=edges)
    return LengthSummary(
        n,
        total,
        int(np.count_nonzero(lengths == 0)),
        LengthStats(int(lengths.min()), int(lengths.max()), total / n, p50, p90, p99),
        Histogram(edges.tolist(), counts.tolist()),
    )


def _log_edges(longest: int) -> np.ndarray:
    return np.unique(np.concatenate(([0, 1], np.geomspace(1, max(longest, 1) + 1, HISTOGRAM_BINS))).astype(np.int64))


def chunked_length_stats(chunks: Iterable[np.ndarray]) -> LengthSummary | None:
    """:func:`length_stats` of the concatenation of ``chunks`` (int64 tokens per document), one chunk at a time: a
    count of every length (8 bytes a value) gives NumPy's linear-interpolation percentiles and the histogram.
    None if a document is over :data:`EXACT_HISTOGRAM_MAX` tokens (the caller falls back to the whole array)."""
    counts = np.zeros(1, np.int64)
    n = total = 0
    for part in chunks:
        n += int(part.shape[0])
        if not part.size:
            continue
        total += int(part.sum())
        if int(part.max()) > EXACT_HISTOGRAM_MAX:
            return None
        c = np.bincount(part)
        if c.shape[0] > counts.shape[0]:
            counts = np.concatenate((counts, np.zeros(c.shape[0] - counts.shape[0], np.int64)))
        counts[: c.shape[0]] += c
    if n == 0:
        raise ValueError("no documents to analyze")
    cum = np.concatenate(([0], np.cumsum(counts)))  # cum[v]: documents shorter than v tokens
    present = np.flatnonzero(counts)
    lo_len, hi_len = int(present[0]), int(present[-1])

    def order_stat(k: int) -> int:  # the k-th smallest length (0-based)
        return int(np.searchsorted(cum, k, side="right")) - 1

    def percentile(q: float) -> float:
        h = q / 100 * (n - 1)
        k = int(np.floor(h))
        a, b = order_stat(k), order_stat(min(k + 1, n - 1))
        return float(a + (h - k) * (b - a))

    edges = _log_edges(hi_len)
    top = cum.shape[0] - 1
    at = np.minimum(edges, top)
    binned = cum[at[1:]] - cum[at[:-1]]
    binned[-1] += cum[min(int(edges[-1]) + 1, top)] - cum[at[-1]]  # the last bin holds its right edge
    return LengthSummary(
        n,
        total,
        int(counts[0]),
        LengthStats(lo_len, hi_len, total / n, percentile(50), percentile(90), percentile(99)),
        Histogram(edges.tolist(), binned.tolist()),
    )


def _default_candidates(lengths: np.ndarray | LengthStats) -> list[tuple[str, float]]:
    p90, p99 = (lengths.p90, lengths.p99) if isinstance(lengths, LengthStats) else np.percentile(lengths, [90, 99])
    pow2 = 1 << max(int(np.ceil(np.log2(max(p99, 1)))), 0)
    return [("p90", p90), ("p99", p99), ("the power of two at or above p99", pow2), ("twice that", 2 * pow2)]


def default_contexts(lengths: np.ndarray | LengthStats, tile: int) -> list[int]:
    """p90, p99, the power of two at or above p99 and twice that (of the lengths or their statistics), each rounded
    up to a multiple of ``tile`` and at most :data:`DEFAULT_CTX_CAP` tokens (equal ones merged)."""
    cap = tile_align(DEFAULT_CTX_CAP, tile)
    return sorted({min(tile_align(max(int(np.ceil(x)), 1), tile), cap) for _, x in _default_candidates(lengths)})


def contexts_note(lengths: LengthStats, tile: int, contexts: list[int], *, given: bool) -> str:
    """One sentence for the report: which contexts were evaluated and why (the defaults, spelled out)."""
    shown = ", ".join(f"{c:,}" for c in contexts)
    if given:
        return f"contexts evaluated: {shown} (as given with --ctx)"
    parts = ", ".join(f"{name} {x:,.0f}" for name, x in _default_candidates(lengths))
    note = (
        f"contexts evaluated: {shown}, the defaults: {parts}, each rounded up to a multiple of the tile "
        f"({tile}) and capped at {tile_align(DEFAULT_CTX_CAP, tile):,}"
    )
    if len(contexts) < 4:
        note += f" (equal ones merged: {len(contexts)} left of 4)"
    if lengths.max > contexts[-1]:
        note += f"; the longest document ({lengths.max:,} tokens) is over the largest ctx and is split"
    return note + "; --ctx N (repeatable) evaluates others"


class SharedLengthArrays:
    """Arrays shared by the strategies at each ctx, computed once on first use (thread-safe).

    ``lengths``: validated int64 tokens per document; or, over :data:`CHUNK` documents, any 1-D integer array (e.g. a
    memory-mapped ``lengths.npy``), read and validated a slice at a time, never copied whole."""

    def __init__(self, lengths: np.ndarray):
        self._source = lengths
        self.chunked = int(lengths.shape[0]) > CHUNK
        self.nonempty = None if self.chunked else (lengths[lengths > 0] if (lengths == 0).any() else lengths)
        self.docs = self.total = 0
        for part in self.chunks():
            self.docs += int(part.shape[0])
            self.total += int(part.sum())
        self._cache: dict[Hashable, object] = {}
        self._locks: dict[Hashable, threading.Lock] = {}
        self._guard = threading.Lock()

    def _get(self, key: Hashable, make: Callable[[], T]) -> T:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._cache:
                self._cache[key] = make()
            return cast(T, self._cache[key])  # what make() of this key gave

    def slices(self) -> Iterator[np.ndarray]:
        """Every document's length (int64), a slice of :data:`CHUNK` documents at a time, validated as read."""
        for lo in range(0, int(self._source.shape[0]), CHUNK):
            yield as_lengths(np.asarray(self._source[lo : lo + CHUNK]), f"lengths[{lo}:]")

    def chunks(self) -> Iterator[np.ndarray]:
        """The non-empty documents' lengths (int64), in order: the whole array, or one slice after another."""
        if self.nonempty is not None:
            yield self.nonempty
            return
        for part in self.slices():
            yield part[part > 0] if not part.all() else part

    def sizes(self, ctx: int) -> np.ndarray:
        """int32 piece sizes at ctx, input order (whole: 4 bytes a piece)."""
        return self._get(("sizes", ctx), lambda: np.concatenate([piece_sizes(p, ctx) for p in self.chunks()]))

    def pad_stats(self, ctx: int) -> tuple[int, int, float]:
        """(kept tokens, documents longer than ctx, causal in-document query-key pairs) under truncation at ctx."""

        def make() -> tuple[int, int, float]:
            kept = long_docs = 0
            pairs = 0.0
            for chunk in self.chunks():
                chunk_pairs = 0.0  # summed per slice, then per chunk (the figures' float order)
                for lo in range(0, chunk.shape[0], PAD_CHUNK):
                    part = chunk[lo : lo + PAD_CHUNK]
                    kept_part = np.minimum(part, ctx)
                    kept += int(kept_part.sum())
                    long_docs += int(np.count_nonzero(part > ctx))
                    kept_f = kept_part.astype(np.float64)
                    chunk_pairs += float((kept_f * (kept_f + 1) / 2).sum())
                pairs += chunk_pairs
            return kept, long_docs, pairs

        return self._get(("pad", ctx), make)

    def histogram(self, ctx: int) -> np.ndarray:
        """int64 (ctx + 1,): pieces of each size at ctx (:func:`piece_histogram`)."""
        return self._get(
            ("histogram", ctx), lambda: functools.reduce(operator.add, (piece_histogram(p, ctx) for p in self.chunks()))
        )

    def count(self, ctx: int, name: str, max_segments: int | None, window: int) -> PackCount:
        """:func:`count_rows` of an in-order packer: on cached piece sizes, or a slice at a time when chunked."""
        if self.chunked or BY_NAME[name].cuts_documents:
            win = None if BY_NAME[name].cuts_documents else window
            return count_rows_chunked(ctx, name, self.chunks(), max_segments=max_segments, window=win)
        return count_rows(ctx, name, sizes=self.sizes(ctx), max_segments=max_segments, window=window)

    def segment_pairs(self, ctx: int) -> float:
        """Causal query-key pairs inside the pieces at ctx (sum of s(s+1)/2): a segment-aware kernel's work."""

        def make() -> float:
            counts = self.histogram(ctx)
            sizes = np.flatnonzero(counts).astype(np.float64)
            return float((counts[counts > 0] * sizes * (sizes + 1) / 2).sum())

        return self._get(("pairs", ctx), make)


def _bucket(prep: SharedLengthArrays, ctx: int, tile: int, buckets: int) -> tuple[np.ndarray, int, int]:
    """Optimal boundaries (tile multiples below ctx, and ctx) for the pieces at ctx, and their padded slots."""
    counts = prep.histogram(ctx)
    sizes = np.flatnonzero(counts)
    need = np.minimum(-(-sizes // tile) * tile, ctx)  # each piece's smallest candidate boundary
    cand = np.unique(np.append(need, ctx))
    per_cand = np.zeros(cand.shape[0], np.int64)
    np.add.at(per_cand, np.searchsorted(cand, need), counts[sizes])
    bounds, slots = optimal_boundaries(cand.astype(np.int64), per_cand, buckets)
    return bounds, int(slots), int(counts.sum())


def simulate(
    prep: SharedLengthArrays | np.ndarray, ctx: int, name: str, options: PaddingOptions = PaddingOptions()
) -> StrategyResult:
    """One strategy at one ctx (:class:`StrategyResult`); ``prep``: a :class:`SharedLengthArrays` (shared across
    calls) or lengths."""
    t0 = time.perf_counter()
    if not isinstance(prep, SharedLengthArrays):
        prep = SharedLengthArrays(as_lengths(prep))
    docs, total = prep.docs, prep.total
    kept, long_docs, _ = prep.pad_stats(ctx)
    boundaries = None
    # rows, slots, tokens kept, pieces, documents truncated, documents split, most pieces in a row
    if name == "pad":
        rows, slots, used, pieces, truncated, split, most = docs, docs * ctx, kept, docs, long_docs, 0, min(docs, 1)
    elif name == "bucket":
        bounds, slots, pieces = _bucket(prep, ctx, options.tile, options.buckets)
        boundaries = [int(b) for b in bounds]
        rows, used, truncated, split, most = pieces, total, 0, long_docs, 1
    elif name in BY_NAME:
        if BY_NAME[name].decreasing:  # order-free: on the histogram of piece sizes
            c = count_rows(ctx, name, histogram=prep.histogram(ctx), max_segments=options.max_segments)
        else:  # in input order, with ``window`` open rows (next fit keeps one)
            c = prep.count(ctx, name, options.max_segments, options.window)
        rows, slots, used, truncated, most = c.rows, c.rows * ctx, total, 0, c.max_pieces_per_row
        # concat_split cuts documents at row ends; the packers split the longer than ctx into pieces
        pieces, split = (
            (docs + c.cut_documents, c.cut_documents) if BY_NAME[name].cuts_documents else (c.pieces, long_docs)
        )
    else:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {short_repr(name)}")
    dense, segment = attention_pairs(prep, ctx, name, rows, boundaries)
    return StrategyResult(
        name,
        ctx,
        int(rows),
        used / slots if slots else 0.0,
        int(total - used),
        truncated / docs if docs else 0.0,
        split / docs if docs else 0.0,
        pieces / rows if rows else 0.0,
        int(most),
        dense,
        segment,
        dense / segment if segment else None,
        time.perf_counter() - t0,
        boundaries=boundaries,
    )


def attention_pairs(
    prep: SharedLengthArrays, ctx: int, name: str, rows: int, boundaries: list[int] | None
) -> tuple[float, float]:
    """(query-key pairs a dense causal kernel computes over every row, padding included; the in-document pairs a
    segment-aware kernel computes). For concat_split the second is an upper bound (it cuts documents further)."""
    segment = prep.pad_stats(ctx)[2] if name == "pad" else prep.segment_pairs(ctx)
    if boundaries is None:
        return rows * ctx * (ctx + 1) / 2, segment
    counts = prep.histogram(ctx)
    sizes = np.flatnonzero(counts)
    bounds = np.asarray(boundaries, np.int64)
    padded = bounds[np.minimum(np.searchsorted(bounds, sizes), bounds.size - 1)].astype(np.float64)
    return float((counts[sizes] * padded * (padded + 1) / 2).sum()), segment


# Longest first, so two threads finish together (measured at 100M documents).
_COST = {"bucket": 1, "pad": 1, **{a.name: a.cost for a in TABLE}}


def analyze(
    lengths: npt.ArrayLike, options: PaddingOptions = PaddingOptions(), *, progress: Callable[[], object] | None = None
) -> PaddingReport:
    """The :class:`PaddingReport` of ``lengths`` (tokens per document): statistics, every strategy at every ctx, and
    a recommendation. ``progress()`` is called after each strategy."""
    big = isinstance(lengths, np.ndarray) and lengths.ndim == 1 and lengths.shape[0] > CHUNK
    array = lengths if big and isinstance(lengths, np.ndarray) else as_lengths(lengths)
    prep = SharedLengthArrays(array)
    stats = (chunked_length_stats(prep.slices()) if big else None) or length_stats(as_lengths(array) if big else array)
    if stats.num_tokens == 0:
        raise ValueError("every document is empty (0 tokens)")
    given = options.contexts is not None
    if options.contexts is None:
        options = dataclasses.replace(options, contexts=tuple(default_contexts(stats.lengths, options.tile)))
    contexts, strategies = list(options.contexts or ()), options.strategies
    jobs = sorted(((ctx, name) for ctx in contexts for name in strategies), key=lambda j: -_COST[j[1]] * j[0])
    with ThreadPoolExecutor(max(1, options.threads)) as pool:
        futures = {job: pool.submit(simulate, prep, job[0], job[1], options) for job in jobs}
        for f in as_completed(futures.values()):
            f.result()
            if progress:
                progress()
    results = [futures[(ctx, name)].result() for ctx in contexts for name in strategies]
    baseline = {r.ctx: r.efficiency for r in results if r.name == "pad"}
    results = [
        dataclasses.replace(r, speedup_bound=r.efficiency / baseline[r.ctx] if baseline.get(r.ctx) else None)
        for r in results
    ]
    recommendation = recommend(results, stats.lengths.p99, options, prep)
    packer = next(
        (n for n in (DEFAULT_ALGORITHM, recommendation.strategy, *strategies) if n in strategies and n in PACKERS),
        None,
    )
    tiles = None
    if packer:  # the attention view: rows of whole pieces back to back (the packers' rows)
        packed = {r.ctx: r.rows for r in results if r.name == packer}
        tiles = attention_tile_view(packer, {c: prep.histogram(c) for c in packed}, packed)
    return PaddingReport(
        stats.num_sequences,
        stats.num_tokens,
        stats.empty,
        stats.lengths,
        stats.histogram,
        contexts,
        contexts_note(stats.lengths, options.tile, contexts, given=given),
        options.tile,
        options.buckets,
        options.window,
        options.max_segments,
        results,
        recommendation,
        tiles,
    )


SEGMENT_CAPS = (4, 8, 16, 32, 64, 128, 256)


def _segment_cap(
    prep: SharedLengthArrays, ctx: int, name: str, efficiency: float, options: PaddingOptions
) -> int | None:
    """The smallest cap on documents per row that costs under half a point of efficiency (None: no cap does)."""
    for cap in SEGMENT_CAPS:
        if simulate(prep, ctx, name, dataclasses.replace(options, max_segments=cap)).efficiency >= efficiency - 0.005:
            return cap
    return None


def recommend(
    results: list[StrategyResult], p99: float, options: PaddingOptions, prep: SharedLengthArrays
) -> Recommendation:
    """Pick a ctx and a strategy from ``results``, with a datatools pipeline snippet and the MaxText settings.

    ctx: the smallest evaluated at or above ``p99``, else the largest. Strategy: padding when it wastes under 5%;
    else the most efficient whole-document packer (ties: best_fit_decreasing), or concat_split when over one point
    better. max_segments: the given cap, else the smallest of :data:`SEGMENT_CAPS` losing under half a point."""
    contexts = options.contexts or sorted({r.ctx for r in results})
    ctx = next((c for c in contexts if c >= p99), contexts[-1])
    at = {r.name: r for r in results if r.ctx == ctx}
    pad = at.get("pad")
    packers = [at[n] for n in reversed(PACKERS) if n in at]  # ties: the later row of the table
    if pad and (pad.efficiency >= 0.95 or not packers):
        choice = pad
    else:
        choice = max(packers, key=lambda r: r.efficiency + (1e-9 if r.name == DEFAULT_ALGORITHM else 0))
        cs = at.get("concat_split")
        if cs and cs.efficiency > choice.efficiency + 0.01:
            choice = cs
    name = choice.name
    max_segments, segments_reason = _segments(choice, prep, ctx, options)
    reasons = []
    if pad:
        reasons.append(f"padding to {ctx} keeps {pad.efficiency:.1%} of the compute for real tokens")
    if name != "pad":
        reasons.append(f"{name} packing keeps {choice.efficiency:.1%} (speed-up bound {choice.speedup_bound:.2f}x)")
    bucket = at.get("bucket")
    if bucket and name != "pad":
        reasons.append(f"without segment-aware attention, {options.buckets} buckets would keep {bucket.efficiency:.1%}")
    snippet, maxtext = _settings(name, ctx, max_segments)
    return Recommendation(
        name,
        ctx,
        choice.efficiency,
        choice.speedup_bound,
        max_segments,
        segments_reason,
        "; ".join(reasons),
        snippet,
        maxtext,
    )


def _segments(
    choice: StrategyResult, prep: SharedLengthArrays, ctx: int, options: PaddingOptions
) -> tuple[int | None, str]:
    """The recommendation's cap on documents per row and why, in words: as given, else the smallest of
    :data:`SEGMENT_CAPS` within half a point of uncapped packing, else the most an uncapped row holds."""
    if options.max_segments:
        return options.max_segments, f"max_segments {options.max_segments}: as given (--max-segments)"
    if choice.name == "pad":
        return None, ""
    most = choice.max_docs_per_row
    cap = _segment_cap(prep, ctx, choice.name, choice.efficiency, options)  # attention kernels want a small cap
    why = (
        "packed-attention kernels (cuDNN / Transformer Engine flash attention, MaxText's "
        "max_segments_per_seq) need a fixed cap on documents per row, and a smaller cap costs them less "
        "memory and time"
    )
    if cap is not None:
        return cap, (
            f"max_segments {cap}: the smallest of {', '.join(map(str, SEGMENT_CAPS))} documents "
            f"per row that keeps efficiency within half a point of uncapped packing (whose rows "
            f"hold up to {most}); {why}"
        )
    return most, (
        f"max_segments {most}: the most documents an uncapped row holds; every smaller cap tried loses "
        f"over half a point; {why}"
    )


def _settings(name: str, ctx: int, max_segments: int | None) -> tuple[str, dict[str, int | bool | str | None]]:
    """The datatools pipeline snippet and the MaxText settings of strategy ``name`` at ``ctx``."""
    if name == "pad":
        snippet = (
            f"packing:\n  mode: planned\n  ctx: {ctx}\n  algorithm: {DEFAULT_ALGORITHM}\n"
            f"# padding already wastes under 5%: packing is optional"
        )
        return snippet, {"packing": False, "max_target_length": ctx}
    mode = BY_NAME[name].mode
    snippet = f"packing:\n  mode: {mode}\n  ctx: {ctx}\n  algorithm: {name}\n  max_segments: {max_segments}"
    # MaxText passes max_segments_per_seq (always set here) to its first-fit packer only: best_fit ignores it
    return snippet, {
        "packing": True,
        "max_target_length": ctx,
        "grain_packing_type": "first_fit",
        "max_segments_per_seq": max_segments,
    }
