"""Balanced global batches: any schedule's batches, each one's rows reordered so every device's slice carries the
same attention work and tokens (config key ``devices``).

Trainers shard a global batch of B rows over D devices in contiguous slices of B / D rows, hosts in order (host h of
H holds devices ``[h * D / H, (h + 1) * D / H)``); a step waits for its busiest device. :class:`BalancedSchedule`
wraps a schedule and gives position i of batch j the row ``order(epoch, j)[i]`` of the wrapped batch, the order of
:func:`~datatools.kernels.balance.balance_order` over the rows' tile work (``block`` x ``block`` tiles inside
documents, :func:`~datatools.kernels.attention_blocks.row_tiles`) and tokens, both from the lengths alone. A batch
holds the same rows as before, so every guarantee of the wrapped schedule stays: every token once per epoch, the same
batches for any number of workers, restart positions (a mixture), and a position that restores on any host count.
Restoring with another device count changes only the order of rows inside the batches from then on. Costs per batch,
on every host: the batch's plan from lengths (~0.1-1 ms) and the order (~0.05-2 ms).

``across`` = G > 1 (config key ``balance_across``): where a batch's heaviest rows exceed a device's share (two rows a
device or fewer), no order inside it balances, so rows are exchanged between the G consecutive batches of a group
(batches ``[g G, (g + 1) G)`` of an epoch, the last group shorter): the group's rows are dealt to its batches and
devices by :func:`~datatools.kernels.balance.balance_group`. Batch contents change (each batch's rows come from the
group's G batches as drawn), every row is still delivered once per epoch, and a group is a function of its index
alone, computed whole on every host: the state stays "global batches consumed" and restores exactly on any host and
worker count. The arrangement depends on ``devices`` and G, which the pipeline's identity then holds: a restore with
another device count is refused. A group whose batches differ in height is balanced batch by batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datatools.base.checks import check_int
from datatools.grain.host_batches import empty_rows
from datatools.grain.schedule import EpochCache, PlannedRowsSchedule
from datatools.kernels.attention_blocks import row_tiles
from datatools.kernels.balance import balance_group, balance_key, balance_order
from datatools.kernels.packing import PackPlan
from datatools.kernels.packing.plan_format import row_pieces

BATCHES_KEPT = 16  # batch orders cached per process (a host asks for the pieces, then the rows, of a few batches)
GROUPS_KEPT = 4  # groups (balance_across) cached per process
DEFAULT_BLOCK = 128  # the tile (tokens) work is counted at when the config names none (attention_block)


def row_work(plan: PackPlan, rows: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(tiles, tokens): int64 (rows,) per row of a batch whose first ``plan.num_rows`` rows are ``plan``'s (the rest
    empty): ``block`` x ``block`` tiles inside documents (what a block-sparse kernel visits) and tokens."""
    tiles = np.zeros(rows, np.int64)
    tokens = np.zeros(rows, np.int64)
    n = plan.num_rows
    if n:
        tiles[:n] = row_tiles(plan.row_splits, plan.length, block, align=plan.align)[:, 1]
        cum = np.concatenate(([0], np.cumsum(plan.length, dtype=np.int64)))
        tokens[:n] = np.diff(cum[plan.row_splits])
    return tiles, tokens


class BalancedSchedule:
    """``inner``'s global batches with each batch's rows ordered for ``devices`` devices (see the module docstring):
    ``block`` is the attention tile (tokens) the work is counted at. Every batch height must divide by ``devices``.
    Attributes the wrapper does not define (``order``, ``restart_position``, ``docs``, ...) are ``inner``'s."""

    def __init__(self, inner: PlannedRowsSchedule, *, devices: int, block: int = DEFAULT_BLOCK, across: int = 1):
        self.inner = inner
        self.devices = check_int(devices, "devices", minimum=1)
        self.block = check_int(block, "block", minimum=1)
        self.across = check_int(across, "balance_across", minimum=1)
        bad = [r for r in inner.row_counts if r % self.devices]
        if bad:
            raise ValueError(
                f"devices={devices} does not divide a global batch of {bad[0]} rows: each device takes an equal, "
                f"contiguous slice (batch_size, and every bucket's batch size, must be a multiple of devices)"
            )
        self.shapes = inner.shapes
        self.row_counts = inner.row_counts
        self._orders = EpochCache(keep=BATCHES_KEPT)
        self._groups = EpochCache(keep=GROUPS_KEPT)

    def __getattr__(self, name: str) -> Any:
        # carry_host ships one host's lanes; a balanced batch reads rows of any lane, so it is not passed on
        if name.startswith("_") or name in ("inner", "carry_host"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"inner": self.inner, "devices": self.devices, "block": self.block, "across": self.across}

    def __setstate__(self, state: dict[str, Any]) -> None:
        BalancedSchedule.__init__(
            self, state["inner"], devices=state["devices"], block=state["block"], across=state["across"]
        )

    def num_batches(self, epoch: int) -> int:
        return self.inner.num_batches(epoch)

    def batch_rows(self, epoch: int, j: int) -> int:
        return self.inner.batch_rows(epoch, j)

    def batch(self, epoch: int, j: int) -> tuple[PackPlan, np.ndarray]:
        """(a plan holding the rows of balanced batch ``j``; the order: position i of the batch is row ``order[i]``
        of the plan, rows past the plan's empty). The plan is ``inner``'s batch ``j``'s data rows, or with
        ``across`` > 1 those of its whole group."""
        if self.across == 1:
            return self._orders.get((epoch, j), self._batch)
        g = j // self.across
        plan, arrangement, starts = self._groups.get((epoch, g), self._group)
        b = j - g * self.across
        return plan, arrangement[starts[b] : starts[b + 1]]

    def _group(self, key: tuple[int, int]) -> tuple[PackPlan, np.ndarray, np.ndarray]:
        """(the data rows of group ``g``'s batches as one plan, batch after batch; the arrangement: position i of
        the group's balanced batches, back to back, holds plan row ``arrangement[i]`` (past the plan: empty); each
        batch's first position, and the end)."""
        epoch, g = key
        first = g * self.across
        js = range(first, min(first + self.across, self.inner.num_batches(epoch)))
        heights = [self.inner.batch_rows(epoch, j) for j in js]
        plans = [self.inner.rows_plan(epoch, j, 0, h) for j, h in zip(js, heights)]
        plan = _concat(plans)
        index, keys = [], []
        at = 0
        for p, h in zip(plans, heights):
            rows = np.full(h, plan.num_rows, np.int64)  # empty rows: past the plan
            rows[: p.num_rows] = at + np.arange(p.num_rows)
            at += p.num_rows
            index.append(rows)
            keys.append(balance_key(*row_work(p, h, self.block), plan.ctx))
        starts = np.concatenate(([0], np.cumsum(heights))).astype(np.int64)
        if len(set(heights)) == 1:
            perm = balance_group(np.concatenate(keys), len(heights), self.devices)
        else:  # batches of different heights keep their rows: each balanced alone
            perm = np.concatenate([balance_order(k, self.devices) + s for k, s in zip(keys, starts)])
        return plan, np.concatenate(index)[perm], starts

    def _batch(self, key: tuple[int, int]) -> tuple[PackPlan, np.ndarray]:
        epoch, j = key
        rows = self.inner.batch_rows(epoch, j)
        plan = self.inner.rows_plan(epoch, j, 0, rows)
        tiles, tokens = row_work(plan, rows, self.block)
        return plan, balance_order(balance_key(tiles, tokens, plan.ctx), self.devices)

    def work(self, epoch: int, j: int) -> tuple[np.ndarray, np.ndarray]:
        """(tiles, tokens) of every row of balanced batch ``j`` in its order (int64 (rows,))."""
        plan, order = self.batch(epoch, j)
        tiles, tokens = row_work(plan, plan.num_rows + 1, self.block)  # the last: an empty row
        at = np.minimum(order, plan.num_rows)
        return tiles[at], tokens[at]

    def rows_plan(self, epoch: int, j: int, lo: int, hi: int) -> PackPlan:
        """Rows [lo, hi) of balanced batch ``j`` that hold data, as one plan (its rows in position order; the empty
        rows among them left out)."""
        plan, order = self.batch(epoch, j)
        return _take(plan, order[lo:hi])

    def pieces(self, epoch: int, j: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(doc, start, length)`` of every piece rows ``[lo, hi)`` of balanced batch ``j`` read."""
        plan, order = self.batch(epoch, j)
        rows = order[lo:hi]
        sel, _ = row_pieces(plan.row_splits, rows[rows < plan.num_rows])
        return plan.doc[sel], plan.start[sel], plan.length[sel]

    ahead_pieces = pieces  # a row's own pieces: a balanced host reads rows of many windows (lanes)

    def read(self, epoch: int, j: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        plan, order = self.batch(epoch, j)
        rows = order[lo:hi]
        held = np.flatnonzero(rows < plan.num_rows)
        pad_id = int(self.inner.pad_id)
        inner: Any = self.inner  # every schedule reads a document source (docs)
        docs = inner.docs
        out = empty_rows(hi - lo, plan.ctx, pad_id, fill_from=0 if held.shape[0] < rows.shape[0] else hi - lo)
        if held.shape[0] == rows.shape[0]:
            docs.pack_rows(plan, rows, pad_id=pad_id, out=out)
        elif held.shape[0]:
            part = docs.pack_rows(plan, rows[held], pad_id=pad_id)
            for key, value in part.items():
                out[key][held] = value
        return out


def _take(plan: PackPlan, rows: np.ndarray) -> PackPlan:
    """Rows ``rows`` (those below ``plan.num_rows``) of ``plan`` as one plan, in order."""
    rows = rows[rows < plan.num_rows]
    sel, splits = row_pieces(plan.row_splits, rows)
    doc, start, length = plan.doc[sel], plan.start[sel], plan.length[sel]
    return PackPlan.of_rows(plan.ctx, plan.align, splits, doc, start, length, plan.algorithm)


def _concat(plans: list[PackPlan]) -> PackPlan:
    """The rows of ``plans`` (one ctx and alignment) as one plan, in order."""
    first = plans[0]
    counts = np.concatenate([np.diff(p.row_splits) for p in plans]).astype(np.int64)
    splits = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    doc, start, length = (np.concatenate([getattr(p, k) for p in plans]) for k in ("doc", "start", "length"))
    return PackPlan.of_rows(first.ctx, first.align, splits, doc, start, length, first.algorithm)
