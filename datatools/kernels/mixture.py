"""Which source each position of a mixture draws from: a deterministic interleave by weight, O(1) per position.

Draws from source k among the first ``h`` positions, ``Q_k(h)``, are a chain of two-way splits: ``Q_0(h) = round(p_0
h)``, ``Q_1(h) = round(r_1 (h - Q_0(h)))`` with ``r_1 = p_1 / (p_1 + ... + p_{K-1})``, ..., the last taking the rest.
They sum to ``h`` and each moves by at most 1 a position: position ``h`` draws from the source whose quota grows.
Every prefix holds each share to within ``K / 2`` draws (Grain's ``MapDataset.mix`` without randomness). Float64:
exact below 2**50.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_POSITION = 1 << 50  # quotas are computed in float64: exact integers below 2**53, margin for the offset


def split_ratios(weights) -> np.ndarray:
    """float64 (K,): the chain's split ratios ``r_k = p_k / (p_k + ... + p_{K-1})`` (0 where that sum is 0; the
    last 1). Weights must be finite and >= 0 with a positive sum."""
    w = np.asarray(weights, np.float64).reshape(-1)
    if w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"mixture weights must be finite, >= 0 and not all 0; got {w.tolist()}")
    w = w / w.max()  # in (0, 1]: sums of weights near 1e308 would overflow to inf (and every ratio read 0)
    tail = np.cumsum(w[::-1])[::-1]  # p_k + ... + p_{K-1}
    r = np.divide(w, tail, out=np.zeros_like(w), where=tail > 0)
    return np.minimum(r, 1.0)


def quotas(ratios: np.ndarray, h) -> np.ndarray:
    """int64 (len(h), K): draws from each source among the first ``h`` positions (see the module docstring)."""
    h = np.asarray(h, np.int64).reshape(-1)
    k = ratios.shape[0]
    out = np.empty((h.shape[0], k), np.int64)
    rest = h.copy()
    for s in range(k - 1):  # K is small (sources); each step is one vector operation over all positions
        q = np.floor(ratios[s] * rest + 0.5).astype(np.int64)
        out[:, s] = q
        rest -= q
    out[:, k - 1] = rest
    return out


@dataclass(frozen=True)
class Segment:
    """Positions ``[start, next segment's start)`` with fixed weights (they change at a restore, or when an
    ``exhaust`` source runs out), from ``counts`` draws per source."""

    start: int  # first position (int)
    counts: np.ndarray  # int64 (K,): each source's draws before ``start``
    ratios: np.ndarray  # float64 (K,): :func:`split_ratios` of the segment's weights
    offset: int  # the seeded shift of the interleave

    def quota(self, h) -> np.ndarray:
        """int64 (len(h), K): draws per source among the segment's first ``h`` positions."""
        h = np.asarray(h, np.int64).reshape(-1)
        return quotas(self.ratios, h + self.offset) - quotas(self.ratios, [self.offset])

    def counts_at(self, position: int) -> np.ndarray:
        """int64 (K,): each source's draws before ``position`` (>= start)."""
        return self.counts + self.quota([position - self.start])[0]


def draw(segments: list[Segment], positions) -> tuple[np.ndarray, np.ndarray]:
    """``(source, rank)`` of each position: the source it draws from (int64) and which draw of that source it is
    (int64: the source's draws before it). ``segments`` are sorted by start, the first starting at or before
    every position."""
    positions = np.asarray(positions, np.int64).reshape(-1)
    starts = np.fromiter((s.start for s in segments), np.int64, count=len(segments))
    which = np.searchsorted(starts, positions, side="right") - 1
    if positions.size and (which.min() < 0 or positions.max() >= MAX_POSITION):
        raise ValueError(
            f"mixture positions must lie in [{int(starts[0])}, {MAX_POSITION}); got "
            f"[{int(positions.min())}, {int(positions.max())}]"
        )
    source = np.empty(positions.shape[0], np.int64)
    rank = np.empty(positions.shape[0], np.int64)
    for i in np.unique(which).tolist():  # a few segments per call
        sel = np.flatnonzero(which == i)
        seg = segments[i]
        h = positions[sel] - seg.start
        before, after = seg.quota(h), seg.quota(h + 1)
        src = np.argmax(after - before, axis=1)
        source[sel] = src
        rank[sel] = seg.counts[src] + before[np.arange(sel.shape[0]), src]
    return source, rank


def first_position_reaching(seg: Segment, source: int, count: int, limit: int) -> int:
    """The smallest position in ``[seg.start, limit]`` where ``source`` has ``count`` draws (else ``limit``), by
    bisection."""
    lo, hi = seg.start, limit
    if seg.counts_at(hi)[source] < count:
        return limit
    while lo < hi:
        mid = (lo + hi) // 2
        if seg.counts_at(mid)[source] >= count:
            hi = mid
        else:
            lo = mid + 1
    return lo


def exhaust_segments(sizes, switches: list[tuple[int, np.ndarray]], offset_of) -> list[Segment]:
    """The segments of one ``exhaust`` epoch: every source drawn exactly ``sizes[k]`` times, a source that runs out
    leaving (the others' weights renormalized). ``switches``: sorted ``[(position, weights), ...]``, the first at 0;
    ``offset_of(start) -> int``: the seeded shift of a segment starting at ``start``."""
    sizes = np.asarray(sizes, np.int64)
    total = int(sizes.sum())
    counts = np.zeros_like(sizes)
    out: list[Segment] = []
    for i, (start, weights) in enumerate(switches):
        end = min(switches[i + 1][0] if i + 1 < len(switches) else total, total)
        pos = int(start)
        while pos < end:
            active = counts < sizes
            ratios = split_ratios(np.where(active, np.asarray(weights, np.float64), 0.0))
            seg = Segment(pos, counts.copy(), ratios, int(offset_of(pos)))
            pos = min(first_position_reaching(seg, int(k), int(sizes[k]), end) for k in np.flatnonzero(active))
            out.append(seg)
            counts = seg.counts_at(pos)
    return out
