"""What a length curriculum saves against fixed-ctx packing, counted exactly from the documents' lengths over an epoch.

Fixed ctx: best fit decreasing into rows of ``ctx``, run by a causal kernel (every tile on and under the diagonal) or
a block-sparse one (in-document tiles). Curriculum: the batches of :func:`datatools.kernels.curriculum.curriculum_rows`,
every causal tile of every row. Work in query-key pairs and FLOPs per layer and ``d_model`` (12 x pairs); per
schedule, the share done by 25, 50 and 75% of its steps (what a run stopped early sees).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from datatools.base.checks import DEFAULT_ALGORITHM
from datatools.base.reports import Report
from datatools.kernels.curriculum import attention_work, curriculum_order, curriculum_rows, grow_p2_odds
from datatools.kernels.packing import pack_lengths

FLOPS_PER_PAIR = 12  # training FLOPs per query-key pair, per layer and d_model unit (QK^T + AV, fwd + bwd)
MARKS = (0.25, 0.5, 0.75)  # fractions of the epoch's steps where each schedule's cumulative work is shown


@dataclass(frozen=True)
class ScheduleWork(Report):
    """One schedule: its share of the epoch's (causal-tile) attention work done by each mark."""

    schedule: str
    done_at: dict[str, float]  # "25%" -> share of the epoch's attention work done by then


@dataclass(frozen=True)
class CurriculumSavings(Report):
    """A curriculum against fixed-ctx packing of the same tokens (see the module docstring)."""

    lengths: list[int]  # the curriculum's row lengths (tokens)
    tokens_per_batch: int
    ctx: int  # the fixed-ctx packing compared: the longest length
    block: int  # attention tile (tokens)
    tokens: int
    batches: list[int]  # per length, one epoch
    pack_length: int  # the length whose rows hold the packed remainders (tokens)
    curriculum_slots: int
    curriculum_pairs: int  # in-document causal pairs
    curriculum_causal_pairs: int  # every causal tile of every row of every batch, x block^2
    fixed_rows: int
    fixed_slots: int
    fixed_pairs: int  # in-document causal pairs (segment-aware ideal)
    fixed_causal_pairs: int  # every causal tile of every row (splash, cuDNN, flash by default)
    fixed_document_tile_pairs: int  # tiles holding in-document pairs only (block-sparse), x block^2
    schedules: list[ScheduleWork]

    @property
    def vs_causal(self) -> float:
        """Fixed ctx over every causal tile / the curriculum's batches: times fewer attention FLOPs."""
        return self.fixed_causal_pairs / max(self.curriculum_causal_pairs, 1)

    @property
    def vs_block_sparse(self) -> float:
        """Fixed ctx with in-document tiles only (block-sparse) / the curriculum's batches."""
        return self.fixed_document_tile_pairs / max(self.curriculum_causal_pairs, 1)

    @property
    def curriculum_padding(self) -> float:
        return 1 - self.tokens / max(self.curriculum_slots, 1)

    @property
    def fixed_padding(self) -> float:
        return 1 - self.tokens / max(self.fixed_slots, 1)


def _schedule_odds(schedule: str, k: int) -> np.ndarray:
    if schedule == "grow_p2":
        return grow_p2_odds(k)[None, :]
    if schedule == "mix":
        return np.ones((1, k))
    raise ValueError(f"schedule must be 'grow_p2' or 'mix'; got {schedule!r}")


def curriculum_savings(
    lengths: npt.ArrayLike,
    sizes: Iterable[int],
    tokens_per_batch: int,
    *,
    block: int = 128,
    schedules: Sequence[str] = ("grow_p2", "mix"),
    seed: int = 0,
) -> CurriculumSavings:
    """The attention work and padding of a curriculum of ``sizes`` (tokens, increasing, multiples of the tile
    ``block``) with ``tokens_per_batch`` slots a batch against fixed-ctx packing at its longest, for ``lengths``;
    the cumulative work of ``schedules`` (``grow_p2``, ``mix``) over the epoch; ``seed``: decomposition and order."""
    sizes = [int(s) for s in sizes]
    ctx = sizes[-1]
    bad = [s for s in sizes if s % block]
    if bad:
        raise ValueError(f"block={block} must divide every length and ctx; {bad[0]} is not a multiple")
    rows = curriculum_rows(lengths, sizes, tokens_per_batch, seed=seed)
    batches = rows.batches
    pairs = sum(attention_work(plan, block)["pairs"] for plan in rows.plans)
    nb = np.asarray(sizes, np.int64) // block
    per_row = nb * (nb + 1) // 2 * block * block  # causal pairs of one row of each length
    per_batch = per_row * rows.rows_per_batch  # every row of a batch, empty ones too
    causal = int((per_batch * batches).sum())
    fixed = pack_lengths(np.asarray(lengths, np.int64), ctx, algorithm=DEFAULT_ALGORITHM, overflow="split")
    fw = attention_work(fixed, block)
    marks = []
    for name in schedules:
        order = curriculum_order(batches, _schedule_odds(name, len(sizes)), [1.0], seed=seed, epoch=0)
        done = np.cumsum(per_batch[order.astype(np.int64)])
        marks.append(
            ScheduleWork(
                name, {f"{m:.0%}": float(done[max(int(m * done.shape[0]) - 1, 0)] / max(causal, 1)) for m in MARKS}
            )
        )
    return CurriculumSavings(
        lengths=sizes,
        tokens_per_batch=int(tokens_per_batch),
        ctx=ctx,
        block=int(block),
        tokens=rows.tokens,
        batches=[int(b) for b in batches],
        pack_length=rows.pack_length,
        curriculum_slots=rows.slots,
        curriculum_pairs=int(pairs),
        curriculum_causal_pairs=causal,
        fixed_rows=int(fixed.num_rows),
        fixed_slots=int(fixed.num_rows) * ctx,
        fixed_pairs=fw["pairs"],
        fixed_causal_pairs=fw["causal_tiles"] * block * block,
        fixed_document_tile_pairs=fw["document_tiles"] * block * block,
        schedules=marks,
    )
