"""The busiest device's attention work over the mean, for the user's lengths: global batches as a shuffle draws them
against the rows of each batch ordered for the devices (config key ``devices``).

Documents are packed (best fit decreasing, rows of ``ctx``), the rows put in a seeded random order (what planned
packing with a full shuffle does) and cut into global batches of ``batch_size`` rows; device d of D takes the
contiguous rows ``[d B / D, (d + 1) B / D)`` (how MaxText, Levanter and ``datatools train`` shard the batch axis).
Work: in-document ``block`` x ``block`` tiles (what a block-sparse kernel executes). ``bound``: the least any order of
a batch's rows can give (:func:`~datatools.kernels.balance.least_busiest`: exact at 1 and 2 rows a device, a lower
bound above): above a target, reordering alone cannot reach it. Cost: one packing and ~0.1 ms a batch; at most
``max_batches`` batches are counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from datatools.base.checks import check_int
from datatools.base.reports import Report
from datatools.kernels.attention_blocks import row_tiles
from datatools.kernels.balance import balance_key, balance_order, busiest_over_mean, least_busiest
from datatools.kernels.packing import pack_lengths

MAX_BATCHES = 256  # batches counted (a seeded sample of the epoch's when it has more)


@dataclass(frozen=True)
class DeviceLoad(Report):
    """One device count: the busiest device's tiles over the mean device's, mean and p90 over the batches."""

    devices: int
    rows_per_device: int
    drawn_mean: float
    drawn_p90: float
    balanced_mean: float
    balanced_p90: float
    bound_mean: float  # the least any order of the rows gives (exact at 1-2 rows a device), mean over the batches


@dataclass(frozen=True)
class DeviceBalance(Report):
    """The device view of an analysis (see the module docstring)."""

    ctx: int
    block: int
    batch_size: int
    batches: int  # counted
    entries: list[DeviceLoad]
    note: str


def _mean_p90(values: list[float]) -> tuple[float, float]:
    return float(np.mean(values)), float(np.percentile(values, 90))


def device_balance(
    lengths: npt.ArrayLike,
    ctx: int,
    *,
    batch_size: int,
    devices: Iterable[int],
    block: int = 128,
    seed: int = 0,
    max_batches: int = MAX_BATCHES,
) -> DeviceBalance:
    """The :class:`DeviceBalance` of ``lengths`` (tokens per document) at ``ctx`` for each count of ``devices``
    (each must divide ``batch_size``)."""
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    counts = sorted({check_int(d, "devices", minimum=1) for d in devices})
    bad = [d for d in counts if batch_size % d]
    if bad:
        raise ValueError(f"devices={bad[0]} does not divide the global batch of {batch_size} rows")
    if ctx % block:
        raise ValueError(f"block={block} must divide ctx={ctx}")
    plan = pack_lengths(np.asarray(lengths, np.int64), ctx)
    tiles = row_tiles(plan.row_splits, plan.length, block)[:, 1]
    tokens = np.add.reduceat(plan.length.astype(np.int64), plan.row_splits[:-1]) if plan.num_pieces else tiles * 0
    rng = np.random.default_rng(seed)
    order = rng.permutation(plan.num_rows)
    total = plan.num_rows // batch_size
    if total == 0:
        raise ValueError(f"{plan.num_rows} packed rows of ctx {ctx} make no global batch of {batch_size}")
    chosen = np.sort(rng.choice(total, max_batches, replace=False)) if total > max_batches else np.arange(total)
    entries = []
    for d in counts:
        drawn, balanced, bound = [], [], []
        for j in chosen.tolist():
            rows = order[j * batch_size : (j + 1) * batch_size]
            w = tiles[rows]
            p = balance_order(balance_key(w, tokens[rows], ctx), d)
            drawn.append(busiest_over_mean(w, d))
            balanced.append(busiest_over_mean(w[p], d))
            bound.append(least_busiest(w, d))
        entries.append(DeviceLoad(d, batch_size // d, *_mean_p90(drawn), *_mean_p90(balanced), float(np.mean(bound))))
    gain = max(entries, key=lambda e: e.drawn_mean - e.balanced_mean)
    note = (
        f"a step waits for its busiest device: at {gain.devices} devices it does {gain.drawn_mean:.2f}x the mean "
        f"device's attention work as drawn, {gain.balanced_mean:.2f}x with devices: {gain.devices} in the pipeline "
        f"config (each batch's rows reordered, its contents unchanged)"
    )
    short = [e for e in entries if e.bound_mean > 1.15]
    if short:
        note += (
            f"; at {short[0].devices} devices ({short[0].rows_per_device} row(s) each) a batch's heaviest rows "
            f"outweigh a device's share: no order gets below {short[0].bound_mean:.2f}x (more rows per device do)"
        )
    return DeviceBalance(int(ctx), int(block), batch_size, int(chosen.shape[0]), entries, note)
