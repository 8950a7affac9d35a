"""Which attention tile size and ctx give a segment-aware kernel the most to skip, for the user's lengths.

A block-sparse kernel visits the ``block`` x ``block`` tiles holding in-document work; causal flash (splash, cuDNN)
visits rows x nb(nb + 1) / 2 tiles, nb = ctx / block. Their ratio (``ideal_ratio``) bounds what block-sparse
attention gains (``benchmarks/attention.py`` measures it). Non-empty tiles are counted from piece sizes alone: a
piece of s = a block + r + 1 tokens at an offset uniform modulo ``block`` covers ((block - r) T(a + 1) + r T(a + 2))
/ block tiles, T(n) = n(n + 1) / 2, and neighbours share a diagonal tile unless their boundary falls on a block
edge; the estimate lies between every piece's best and worst offset (tested against exact counts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from datatools.base.reports import Report

BLOCKS = (64, 128)


@dataclass(frozen=True)
class TileCount(Report):
    """Tiles of ``rows`` packed rows of ``ctx`` tokens at tile size ``block``: non-empty (expected, with bounds),
    causal, and their ratio."""

    ctx: int
    block: int
    rows: int
    causal_tiles: int
    non_empty_tiles: float
    non_empty_low: float
    non_empty_high: float
    ideal_ratio: float | None  # causal / non-empty tiles


@dataclass(frozen=True)
class AttentionTiles(Report):
    """The attention view of an analysis: per ctx and tile size, and the pair with the best ratio."""

    packing: str  # the packing whose rows are counted
    entries: list[TileCount]
    best: TileCount | None
    note: str


def _triangle(n: np.ndarray) -> np.ndarray:
    triangle: np.ndarray = n * (n + 1) / 2
    return triangle


def piece_tiles(sizes: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fewest, expected, most) tiles each piece of ``sizes`` tokens covers, over its offsets modulo ``block``
    (float64 arrays, one entry per size)."""
    s = np.asarray(sizes, np.int64)
    a, r = np.divmod(s - 1, block)
    low, high = _triangle(a + 1.0), _triangle(a + 2.0)
    expected = ((block - r) * low + r * high) / block
    return low, expected, np.where(r > 0, high, low)


def tile_counts(counts: np.ndarray, rows: int, ctx: int, block: int) -> TileCount:
    """The :class:`TileCount` of ``rows`` rows of ``ctx`` tokens (a multiple of ``block``) holding ``counts[s]``
    pieces of s tokens."""
    counts = np.asarray(counts)
    sizes = np.flatnonzero(counts)
    n = counts[sizes].astype(np.float64)
    low, expected, high = piece_tiles(sizes, block)
    inside = max(0.0, float(n.sum()) - rows)  # boundaries between neighbouring pieces of a row
    nb = ctx // block
    causal = rows * nb * (nb + 1) // 2
    non_empty = float((n * expected).sum()) - inside * (block - 1) / block
    return TileCount(
        int(ctx),
        int(block),
        int(rows),
        int(causal),
        non_empty,
        float((n * low).sum()) - inside,
        float((n * high).sum()),
        causal / non_empty if non_empty > 0 else None,
    )


def attention_tile_view(
    packing: str, histograms: dict[int, np.ndarray], rows: dict[int, int], blocks: Sequence[int] = BLOCKS
) -> AttentionTiles:
    """Per ctx (``histograms``: pieces per size; ``rows``: rows of ``packing``) and tile size of ``blocks`` dividing
    it, non-empty against causal tiles, and the best pair."""
    entries = [
        tile_counts(histograms[ctx], rows[ctx], ctx, block)
        for ctx in sorted(histograms)
        for block in blocks
        if ctx % block == 0 and rows.get(ctx)
    ]
    scored = [(e.ideal_ratio, e.block, e) for e in entries if e.ideal_ratio is not None]
    best = max(scored, key=lambda t: t[:2])[2] if scored else None
    note = (
        ""
        if best is None
        else f"tile {best.block} at ctx {best.ctx:,} gives the best ratio: a block-sparse kernel visits "
        f"{best.non_empty_tiles:,.0f} tiles where causal flash visits {best.causal_tiles:,} "
        f"({best.ideal_ratio:.1f}x at most); larger ctx always raises the ratio (causal tiles grow with ctx, "
        f"a document's tiles do not), so pick the ctx for the model and read the tile size off its rows"
    )
    return AttentionTiles(packing, entries, best, note)
