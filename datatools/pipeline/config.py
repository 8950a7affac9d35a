"""The pipeline config: the YAML schema as frozen, typed dataclasses (validated by
:func:`datatools.pipeline.schema.from_dict`, rendered into ``configs/README.md``), and reading it
(:func:`load_config`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from datatools.base.checks import (
    DEFAULT_ALGORITHM,
    MAX_BATCH,
    MAX_BUCKETS,
    MAX_CTX,
    MAX_RECORDS,
    MAX_TOKEN_ID,
    MAX_WINDOW,
    MAX_WORKERS,
    OVERFLOW_POLICIES,
)
from datatools.io.formats.yaml_files import load_yaml
from datatools.io.storage.paths import display
from datatools.kernels.batch_layouts import BOUNDARY_TARGETS, FORMATS, POSITIONS
from datatools.kernels.loss_weights import LOSS_WEIGHTINGS
from datatools.kernels.packing import ALGORITHMS, PackOptions
from datatools.pipeline.schema import OneOf, field, from_dict


@dataclass(frozen=True)
class SourceConfig:
    path: str = field(
        doc="token store, Parquet / Arrow / JSON Lines file or directory, HF save_to_disk dir, "
        "NumPy dir (tokens.npy + lengths.npy/offsets.npy); relative to the working directory"
    )
    column: str | None = field(None, doc="token (or text) column of a table; detected when unambiguous")
    tokenizer: str | None = field(
        None,
        doc="tokenizers JSON file, for a text column (tokenized as read; "
        "pre-tokenize large data into a token store instead)",
    )
    tokenizer_settings: Literal["off", "keep"] = field(
        "off",
        doc="off: the file's truncation and padding switched off, no template special tokens; keep: the file as it is",
    )
    bos: str | None = field(None, doc="token (name, id or 'auto') put before every text")
    eos: str | None = field(None, doc="token (name, id or 'auto') put after every text")


@dataclass(frozen=True)
class MixtureSourceConfig(SourceConfig):
    """One source of a mixture (``sources:``): any input, with its own column and tokenizer, and a weight."""

    weight: float = field(
        1.0,
        doc="this source's share of the tokens (or documents: mixture.share) drawn; > 0, "
        "normalized to sum 1; may change at a restore (docs/mixtures.md)",
    )
    name: str | None = field(None, doc="label in reports; default: the path's last part")

    def check(self, where: str) -> None:
        if not self.weight > 0:
            raise ValueError(f"config: {where}.weight must be > 0; got {self.weight!r}")

    @property
    def label(self) -> str:
        return self.name or os.path.basename(os.path.normpath(self.path)) or self.path


@dataclass(frozen=True)
class MixtureConfig:
    epoch: Literal["sample", "exhaust"] = field(
        "sample",
        doc="sample: an epoch draws epoch_documents documents by weight, each source in its own shuffled "
        "order, wrapping into its next epoch (repeating) when it runs out; exhaust: an epoch is every "
        "document of every source once, drawn by weight until a source runs out, then the rest by "
        "their weights renormalized",
    )
    epoch_documents: int | None = field(
        None,
        minimum=1,
        maximum=MAX_RECORDS,
        doc="sample: documents drawn per epoch (default: the documents of all sources)",
    )
    share: Literal["tokens", "documents"] = field(
        "tokens",
        doc="what the weights are shares of: tokens (each source drawn at weight / its mean document "
        "length, so its share of tokens is its weight) or documents",
    )


@dataclass(frozen=True)
class ShuffleConfig:
    kind: Literal["none", "full", "block"] = field(
        "full", doc="none: storage order; full: Feistel permutation per epoch; block: windowed block shuffle"
    )
    io_block_size: int = field(64, minimum=1, maximum=MAX_RECORDS, doc="block shuffle: records per contiguous read")
    window_blocks: int = field(1024, minimum=1, maximum=MAX_RECORDS, doc="block shuffle: blocks per window")


@dataclass(frozen=True)
class PackingConfig:
    ctx: int | None = field(
        None, minimum=1, maximum=MAX_CTX, doc="row length (tokens); required unless plan is given (then the plan's)"
    )
    plan: str | None = field(
        None,
        doc="a plan directory written by datatools pack (relative to the working "
        "directory): rows read from it lazily, memory-mapped; the packing options "
        "are the plan's; refused when planned for other documents than the source",
    )
    mode: Literal["planned", "streaming"] = field(
        "planned", doc="planned: one plan over every document; streaming: packed a window at a time"
    )
    algorithm: Annotated[str, OneOf(ALGORITHMS)] | None = field(
        None, doc=f"default: {DEFAULT_ALGORITHM} (over all documents when planned, within each window when streaming)"
    )
    max_segments: int | None = field(
        None, minimum=1, maximum=MAX_CTX, doc="cap on documents per row (cuDNN / TE packed attention)"
    )
    align: int = field(
        1, minimum=1, maximum=MAX_CTX, doc="every document starts at a multiple of this (tokens); must divide ctx"
    )
    overflow: Annotated[str, OneOf(OVERFLOW_POLICIES)] = field(
        "split", doc="documents longer than ctx: split (nothing lost), truncate, drop, error"
    )
    window: int = field(1024, minimum=1, maximum=MAX_WINDOW, doc="streaming: documents per packing window")
    read_order: Literal["lanes", "window"] = field(
        "lanes",
        doc="streaming with a block shuffle: lanes: each row of the global batch is fed by its own lanes of io "
        "blocks, so each host reads only its rows' blocks, each once per epoch (for data in a bucket); window: "
        "the shuffle window's documents in random order (every batch reads from the whole window)",
    )
    lane_period: int = field(
        2,
        minimum=1,
        maximum=64,
        doc="lanes per row; batch j reads lane phase j % lane_period (a part of the data layout, independent of "
        "workers and hosts)",
    )

    def check(self, where: str) -> None:
        if self.ctx is None and self.plan is None:
            raise ValueError(f"config: {where}.ctx is required (or {where}.plan, a plan written by datatools pack)")
        if self.plan is not None and self.mode != "planned":
            raise ValueError(f"config: {where}.plan needs {where}.mode: planned (got {self.mode!r})")
        if self.ctx is not None and self.ctx % self.align:
            raise ValueError(f"config: {where}.align={self.align} must divide {where}.ctx={self.ctx}")

    def options(self) -> PackOptions:
        """This section's packing (rows of ``ctx`` tokens): what every packing mode below the config takes.
        ``window`` here is documents per streaming window, not the packer's open rows (left None)."""
        if self.ctx is None:
            raise ValueError("config: packing.ctx is required (packing.plan is read by mode: planned only)")
        algorithm = self.algorithm or DEFAULT_ALGORITHM
        return PackOptions(self.ctx, algorithm, self.max_segments, self.align, self.overflow)


@dataclass(frozen=True)
class BucketingConfig:
    boundaries: list[int] | None = field(
        None, minimum=1, maximum=MAX_CTX, doc="bucket lengths; default: optimal for the source"
    )
    num_buckets: int = field(4, minimum=1, maximum=MAX_BUCKETS)
    tile: int = field(128, minimum=1, maximum=MAX_CTX)
    max_len: int | None = field(
        None, minimum=1, maximum=MAX_CTX, doc="longest bucket (tokens); longer documents follow overflow"
    )
    token_budget: int | None = field(
        None, minimum=1, maximum=MAX_BATCH * 64, doc="tokens per batch (rows = budget // length)"
    )
    multiple_of: int = field(1, minimum=1, maximum=MAX_BATCH, doc="round each bucket's rows down to a multiple of this")
    overflow: Annotated[str, OneOf(OVERFLOW_POLICIES)] = field("split")


@dataclass(frozen=True)
class CurriculumStage:
    """One stage of a curriculum schedule: the odds in force until a fraction of the epoch."""

    until: float = field(
        minimum=0.0, maximum=1.0, doc="the fraction of the epoch (of each cycle) where these odds stop applying"
    )
    odds: list[float] = field(
        minimum=0.0,
        maximum=1e12,
        doc="sampling odds, one per length: a step draws length k with probability proportional to "
        "odds[k] x its batches not yet drawn",
    )


@dataclass(frozen=True)
class CurriculumConfig:
    """Dataset decomposition with a length curriculum (docs/curriculum.md): every document cut into pieces of the
    ``lengths``, every batch of one length and ``tokens_per_batch`` slots, the lengths drawn by the schedule."""

    lengths: list[int] = field(
        minimum=1,
        maximum=MAX_CTX,
        doc="the K row lengths (tokens), increasing, multiples of tile; a batch is one length, one compiled "
        "program each",
    )
    tokens_per_batch: int = field(
        minimum=1,
        maximum=MAX_BATCH,
        doc="token slots of every GLOBAL batch: tokens_per_batch / length rows (a multiple of every length)",
    )
    schedule: list[CurriculumStage] | Literal["mix", "grow_p2"] = field(
        "grow_p2",
        doc="grow_p2: the paper's odds 2^(K-1) .. 2, 1 (short first, long later); mix: the fixed odds; or a list "
        "of {until: fraction of the epoch, odds: [one per length]}, in increasing until",
    )
    odds: list[float] | None = field(
        None, minimum=0.0, maximum=1e12, doc="mix: the fixed odds, one per length (default 1 each: a uniform mix)"
    )
    cycles: int = field(
        1,
        minimum=1,
        maximum=1 << 20,
        doc="the epoch runs as this many cycles, each with 1/cycles of every length's batches and the whole schedule",
    )
    tile: int = field(128, minimum=1, maximum=MAX_CTX, doc="every length must be a multiple of this (tokens)")
    pack_length: int | None = field(
        None,
        minimum=1,
        maximum=MAX_CTX,
        doc="the length whose rows the documents' remainders (shorter than the shortest length) are packed into; "
        "default: the shortest whose packing pads under 1% of the tokens (the paper: the shortest)",
    )

    def check(self, where: str) -> None:
        k = len(self.lengths)
        if not 1 <= k <= MAX_BUCKETS:
            raise ValueError(f"config: {where}.lengths must list 1 to {MAX_BUCKETS} lengths; got {k}")
        if any(b <= a for a, b in zip(self.lengths, self.lengths[1:])):
            raise ValueError(f"config: {where}.lengths must be increasing; got {self.lengths}")
        bad = [n for n in self.lengths if n % self.tile]
        if bad:
            raise ValueError(f"config: {where}.lengths must be multiples of {where}.tile={self.tile}; got {bad[0]}")
        bad = [n for n in self.lengths if self.tokens_per_batch % n]
        if bad:
            raise ValueError(
                f"config: {where}.tokens_per_batch={self.tokens_per_batch} must be a multiple of every length "
                f"(rows = tokens_per_batch / length); {bad[0]} does not divide it"
            )
        if self.pack_length is not None and self.pack_length not in self.lengths:
            raise ValueError(
                f"config: {where}.pack_length={self.pack_length} must be one of {where}.lengths {self.lengths}"
            )
        if self.odds is not None:
            if self.schedule != "mix":
                raise ValueError(f"config: {where}.odds is for schedule: mix (a list schedule gives odds per stage)")
            _check_odds(self.odds, k, f"{where}.odds")
        if isinstance(self.schedule, list):
            if not self.schedule:
                raise ValueError(f"config: {where}.schedule must list at least one stage")
            untils = [s.until for s in self.schedule]
            if any(b <= a for a, b in zip(untils, untils[1:])):
                raise ValueError(f"config: {where}.schedule: until must increase from stage to stage; got {untils}")
            for i, stage in enumerate(self.schedule):
                _check_odds(stage.odds, k, f"{where}.schedule[{i}].odds")


def _check_odds(odds: list[float], k: int, key: str) -> None:
    if len(odds) != k:
        raise ValueError(f"config: {key} must give one odds per length ({k}); got {len(odds)}: {odds}")
    if not any(o > 0 for o in odds):
        raise ValueError(f"config: {key} must have some odds > 0; got {odds}")


@dataclass(frozen=True)
class ShardConfig:
    index: int = field(
        0,
        minimum=0,
        doc="this host (jax.process_index()); it reads rows [index*B/count, "
        "(index+1)*B/count) of every global batch of B rows",
    )
    count: int = field(
        1,
        minimum=1,
        maximum=1 << 20,
        doc="hosts (jax.process_count()); must divide batch_size (every bucket's batch size when bucketing)",
    )

    def check(self, where: str) -> None:
        if self.index >= self.count:
            raise ValueError(f"config: {where}.index={self.index} must be < {where}.count={self.count}")


@dataclass(frozen=True)
class PipelineConfig:
    # keys that no longer do anything, refused naming what took their place (schema.from_dict)
    RETIRED_KEYS: ClassVar[dict[str, str]] = {"read_block": "every batch's pieces are read in one call; delete the key"}

    source: SourceConfig | None = field(None, doc="the documents (or sources: a mixture; exactly one of the two)")
    sources: list[MixtureSourceConfig] | None = field(
        None,
        doc="a mixture: documents drawn from each source by weight before packing (streaming packing or "
        "bucketing); each item takes the source keys plus weight and name (docs/mixtures.md)",
    )
    mixture: MixtureConfig = field(default_factory=MixtureConfig, doc="sources: how an epoch of the mixture ends")
    shuffle: ShuffleConfig = field(default_factory=ShuffleConfig)
    packing: PackingConfig | None = field(None)
    bucketing: BucketingConfig | None = field(None)
    curriculum: CurriculumConfig | None = field(
        None,
        doc="dataset decomposition with a length curriculum instead of packing or bucketing: batches of one of K "
        "lengths, the odds moving over the epoch (docs/curriculum.md)",
    )
    batch_size: int = field(
        32,
        minimum=1,
        maximum=MAX_BATCH,
        doc="rows per global batch: all hosts together (one host: its batch); each of "
        "shard.count hosts gets batch_size / shard.count rows (bucketing: unless "
        "token_budget is set)",
    )
    drop_remainder: bool = field(True, doc="drop each epoch's last, short batch (else pad it with empty rows)")
    format: Annotated[str, OneOf(FORMATS)] = field(
        "datatools", doc="batch layout: datatools (canonical), maxtext, levanter, hf"
    )
    boundary_targets: Annotated[str, OneOf(BOUNDARY_TARGETS)] = field(
        "mask",
        doc="mask: a document's last token predicts nothing (packed loss == unpacked loss); next_document: "
        "it predicts the next document's first token in the row (MaxText's ShiftData)",
    )
    positions: Annotated[str, OneOf(POSITIONS)] = field(
        "restart",
        doc="restart: every document piece counts from 0 (MaxText, Grain, transformers; below ctx); "
        "continue: a piece of a split document counts on from its offset",
    )
    loss_weighting: Annotated[str, OneOf(LOSS_WEIGHTINGS)] = field(
        "none",
        doc="none: no loss_weights in the batch (as before); token: every target token of the global batch "
        "weighs 1; document: every document piece weighs 1 (1/n per target token); the step divides by "
        "the global weight sum (docs/loss-weighting.md)",
    )
    num_epochs: int | None = field(1, minimum=1, maximum=1 << 40, doc="null: repeat forever")
    workers: int = field(
        0,
        minimum=0,
        maximum=MAX_WORKERS,
        doc="Grain worker processes, for sources whose batches cost CPU (text tokenized as it is read, tables); a "
        "token store or a Levanter cache is read by one reader per host in threads and refuses workers",
    )
    shard: Literal["auto"] | ShardConfig = field(
        default_factory=ShardConfig,
        doc="this host's share; auto: jax.process_index() of jax.process_count() (after jax.distributed.initialize)",
    )
    seed: int = field(0, minimum=0, maximum=(1 << 64) - 1)
    pad_id: int = field(0, minimum=0, maximum=MAX_TOKEN_ID)
    attention_block: int | None = field(
        None,
        minimum=8,
        maximum=MAX_CTX,
        doc="add each batch's non-empty attention tiles of this many tokens "
        "(block_q, block_k, block_valid per row; tile_* batch-wide) for "
        "block-sparse attention",
    )
    devices: int | None = field(
        None,
        minimum=1,
        maximum=MAX_BATCH,
        doc="accelerators the global batch is split over (jax.device_count()): each takes a contiguous slice of "
        "batch_size / devices rows, hosts in order; set, each batch's rows are ordered so every slice carries the "
        "same attention work (tiles of attention_block, default 128) and tokens (null: the order as drawn)",
    )
    balance_across: int = field(
        1,
        minimum=1,
        maximum=1024,
        doc="with devices: exchange rows between this many consecutive global batches, so each batch's devices "
        "carry equal work where a batch's heaviest rows exceed a device's share (2 rows a device or fewer; "
        "4 is enough on our data). Changes the batches' contents (every row still once per epoch); a "
        "restore needs the same devices and balance_across. 1: rows reordered inside each batch only",
    )

    def check(self, where: str) -> None:
        given = [s for s in ("packing", "bucketing", "curriculum") if getattr(self, s) is not None]
        if len(given) != 1:
            raise ValueError(
                "config: give exactly one of 'packing' and 'bucketing' (or 'curriculum')"
                + (f"; got {', '.join(given)}" if given else "")
            )
        if self.curriculum is not None and self.sources is not None:
            raise ValueError(
                "config: curriculum reads one source (source:); a mixture (sources:) is not yet decomposed by weight"
            )
        if self.source is None and self.sources is None:
            raise ValueError("config: missing required key 'source' (or 'sources': a mixture of several)")
        if self.source is not None and self.sources is not None:
            raise ValueError("config: give exactly one of 'source' (one input) and 'sources' (a mixture)")
        if self.sources is not None:
            if not self.sources:
                raise ValueError("config: sources must list at least one source")
            labels = [s.label for s in self.sources]
            twice = sorted({x for x in labels if labels.count(x) > 1})
            if twice:
                raise ValueError(f"config: sources: the label {twice[0]!r} names two sources; give each a name")
            if self.packing is not None and self.packing.mode == "planned":
                raise ValueError(
                    "config: sources (a mixture) needs packing.mode: streaming or bucketing: planned "
                    "packing plans every document at once, before any order, so rows could not mix "
                    "sources by weight"
                )
        if self.devices is not None:
            if self.curriculum is None and self.bucketing is None and self.batch_size % self.devices:
                raise ValueError(
                    f"config: batch_size={self.batch_size} must be a multiple of devices={self.devices} (each "
                    f"device takes an equal, contiguous slice of every global batch)"
                )
            if isinstance(self.shard, ShardConfig) and self.devices % self.shard.count:
                raise ValueError(
                    f"config: devices={self.devices} must be a multiple of shard.count={self.shard.count} (each "
                    f"host holds whole devices)"
                )
        if self.balance_across > 1:
            if self.devices is None or self.devices < 2:
                raise ValueError(
                    f"config: balance_across={self.balance_across} balances rows over devices: set devices (2 or more)"
                )
            if self.packing is None or self.sources is not None:
                raise ValueError(
                    f"config: balance_across={self.balance_across} exchanges rows between batches of one shape from "
                    "one source: packing, not bucketing, curriculum or a mixture (sources)"
                )
        if self.attention_block is not None and self.format != "datatools":
            raise ValueError(
                f"config: attention_block lists tiles in the datatools format only; format "
                f"{self.format!r} has no place for them (use format: datatools, or drop attention_block)"
            )

    @property
    def mode(self) -> str:
        """How rows are made: ``planned`` or ``streaming`` (packing), ``curriculum`` or ``bucketing``."""
        return self.packing.mode if self.packing else "curriculum" if self.curriculum else "bucketing"

    @property
    def source_label(self) -> str:
        """The source's path, or ``mixture of A, B`` (the sources' labels) for reports and messages."""
        if self.sources is not None:
            return "mixture of " + ", ".join(s.label for s in self.sources)
        return self.one_source.path

    @property
    def one_source(self) -> SourceConfig:
        """``source`` of a config that reads one input; ValueError for a mixture (``sources``)."""
        if self.source is None:
            raise ValueError("config: this reads one source (source:), and the config mixes sources (sources:)")
        return self.source

    @property
    def mixture_sources(self) -> list[MixtureSourceConfig]:
        """``sources`` of a mixture; ValueError for a config of one source (``source``)."""
        if self.sources is None:
            raise ValueError("config: this reads a mixture (sources:), and the config names one source (source:)")
        return self.sources

    @property
    def batch_options(self) -> dict[str, Any]:
        """``boundary_targets``, ``positions`` and ``loss_weighting``: the keywords of
        :func:`~datatools.kernels.batch_layouts.to_format` (and :class:`~datatools.grain.batch.FormatBatch`)."""
        return {name: getattr(self, name) for name in ("boundary_targets", "positions", "loss_weighting")}

    def replace(self, **changes: Any) -> PipelineConfig:
        return dataclasses.replace(self, **changes)


def with_source(data: dict[str, Any], source: str | os.PathLike[str]) -> dict[str, Any]:
    """``data`` with its ``source`` section replaced by ``{path: source}`` (the old source's column and tokenizer
    dropped)."""
    if data.get("sources") is not None:
        raise ValueError(
            f"config: --source {source} replaces 'source', and this config mixes 'sources'; "
            f"edit their paths (--set does not reach list items) or drop 'sources'"
        )
    return {**data, "source": {"path": str(source)}}


def parse_config(data: dict[str, Any], *, source: str | None = None) -> PipelineConfig:
    """Validate a config mapping; ``source`` overrides ``source.path`` (keeping nothing else of it)."""
    data = dict(data) if source is None else with_source(data, source)
    config: PipelineConfig = from_dict(PipelineConfig, data)
    return config


def load_config(
    path: str | os.PathLike[str], *, source: str | None = None, overrides: Sequence[str] = ()
) -> PipelineConfig:
    """Read and validate a YAML pipeline config (extra top-level sections of a training config are ignored).

    Args:
      path: a YAML file, or the name of a packaged config (``pretrain_block_8192``; see
        :mod:`datatools.pipeline.named_configs`).
      source: replaces the ``source`` section by ``{path: source}``.
      overrides: ``KEY=VALUE`` strings (``packing.ctx=2048``) applied after ``source`` (so
        ``source.column=text`` sets the new source's column), before validation.
    """
    from datatools.pipeline.named_configs import apply_overrides, resolve_config

    path = resolve_config(path)
    data = load_yaml(path)
    try:
        if source is not None:  # before the overrides, so --set source.column=... applies to the new source
            data = with_source(data, source)
    except ValueError as exc:
        raise in_file(path, exc) from None
    data = apply_overrides(data, overrides)
    data = {k: v for k, v in data.items() if k not in _TRAINING_SECTIONS}
    try:
        return parse_config(data)
    except ValueError as exc:
        raise in_file(path, exc) from None


def in_file(path: str | os.PathLike[str], exc: ValueError) -> ValueError:
    """``exc`` (a config error, ``config: ...``) as the error of the config file at ``path``: its name in place of
    ``config``."""
    return ValueError(f"{display(path)}: {str(exc).removeprefix('config: ')}")


_TRAINING_SECTIONS = ("model", "train")


ConfigLike: TypeAlias = "PipelineConfig | dict[str, Any] | str | os.PathLike[str]"  # what as_config takes


def as_config(config: ConfigLike, *, source: str | None = None) -> PipelineConfig:
    """``config`` as a validated :class:`PipelineConfig`: one already, a mapping (validated here) or a YAML path;
    ``source`` replaces ``source.path``."""
    if isinstance(config, (str, os.PathLike)):
        return load_config(config, source=source)
    if isinstance(config, dict):
        return parse_config(config, source=source)
    if isinstance(config, PipelineConfig):
        return config if source is None else config.replace(source=SourceConfig(path=str(source)))
    raise TypeError(f"config must be a PipelineConfig, a mapping or a YAML path; got {type(config).__name__}")
