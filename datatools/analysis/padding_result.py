"""The typed result of the padding analysis (``analyze-padding --json`` is :meth:`PaddingReport.to_json`).
Lengths and sizes in tokens, times in seconds; fractions of documents or of slots in [0, 1]."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from datatools.analysis.attention_tiles import AttentionTiles
from datatools.analysis.curriculum import CurriculumSavings
from datatools.analysis.device_balance import DeviceBalance
from datatools.analysis.loss_distortion import LossDistortion
from datatools.analysis.maxtext_simulation import MaxTextReport
from datatools.base.reports import Report


@dataclass(frozen=True)
class LengthStats(Report):
    """Tokens per document: extremes, mean and percentiles."""

    min: int
    max: int
    mean: float
    p50: float
    p90: float
    p99: float


@dataclass(frozen=True)
class Histogram(Report):
    """Documents per length bin: bin ``i`` holds lengths in ``[edges[i], edges[i + 1])`` (log-spaced)."""

    edges: list[int]
    counts: list[int]


@dataclass(frozen=True)
class StrategyResult(Report):
    """One strategy at one ctx (see :mod:`datatools.analysis.padding` for the definitions)."""

    name: str
    ctx: int
    rows: int  # rows (bucket: pieces)
    efficiency: float  # real tokens / slots
    dropped_tokens: int
    truncated_fraction: float  # of documents
    split_fraction: float  # of documents
    docs_per_row: float  # pieces per row
    max_docs_per_row: int
    attention_dense_pairs: float = 0.0  # query-key pairs a dense causal kernel computes, padding included
    attention_segment_pairs: float = 0.0  # the in-document pairs a segment-aware kernel computes
    attention_saving: float | None = None  # dense / segment pairs
    seconds: float = 0.0  # simulation time
    speedup_bound: float | None = None  # efficiency / pad's efficiency at the same ctx
    boundaries: list[int] | None = None  # the bucket strategy's bucket lengths; None for the others


@dataclass(frozen=True)
class Recommendation(Report):
    """The ctx and strategy to use, why, a datatools pipeline snippet and MaxText's closest settings."""

    strategy: str
    ctx: int
    efficiency: float
    speedup_bound: float | None
    max_segments: int | None
    max_segments_reason: str
    reason: str
    datatools_config: str  # YAML: the packing section of a pipeline config
    maxtext: dict[str, int | bool | str | None]  # MaxText keys -> values


@dataclass(frozen=True)
class PaddingReport(Report):
    """The whole padding analysis of one input. The last fields are filled by
    :func:`~datatools.analysis.padding_input.analyze_input` (None when :func:`analyze` ran on lengths alone)."""

    num_sequences: int  # documents
    num_tokens: int
    empty: int  # documents of 0 tokens
    lengths: LengthStats
    histogram: Histogram
    contexts: list[int]  # the ctx values evaluated, ascending
    contexts_note: str  # which contexts were chosen and why
    tile: int
    buckets: int
    window: int
    max_segments: int | None
    strategies: list[StrategyResult]  # every strategy at every ctx
    recommendation: Recommendation
    attention_tiles: AttentionTiles | None = None  # block-sparse against causal tiles (analysis.attention_tiles)
    maxtext: MaxTextReport | None = None  # a MaxText config's pipeline today and what to set (maxtext_simulation)
    loss_distortion: LossDistortion | None = None  # documents' loss weight under a per-row / per-batch mean
    curriculum: CurriculumSavings | None = None  # a length curriculum against fixed-ctx packing (analysis.curriculum)
    devices: DeviceBalance | None = None  # the busiest device's attention work, drawn and balanced (device_balance)
    source: str | None = None  # the input as displayed
    input: dict[str, Any] | None = None  # what the input is (kind, column, tokenizer, bytes)
    read_seconds: float | None = None
    input_bytes: int | None = None
    analyze_seconds: float | None = None

    def at(self, ctx: int) -> list[StrategyResult]:
        """The strategies evaluated at ``ctx``, in the order they were run."""
        return [r for r in self.strategies if r.ctx == ctx]
