"""Equal work per device: the order of a global batch's rows that gives every device's contiguous slice the same
attention work and tokens.

A step waits for its busiest device, and trainers (MaxText, Levanter, ``datatools train``) shard the batch axis in
contiguous slices: device d of D takes rows ``[d * B / D, (d + 1) * B / D)`` of a global batch of B rows, hosts in
order. :func:`balance_order` permutes a batch's rows (its contents unchanged) so the slices carry equal work: rows
sorted by work, each dealt to the lightest device with room (LPT with equal row counts), then the busiest device's
rows swapped with others' while that lowers it. Work is compared first, tokens second (one int64 key). O(B * D)
to deal, O(B * B / D) a swap; a batch of 256 rows over 16 devices takes ~0.1 ms.
"""

from __future__ import annotations

import numba
import numpy as np

from datatools.base.checks import check_int

SWAPS_PER_ROW = 8  # the most improving swaps tried, per row of the batch (each strictly lowers the busiest device)


@numba.njit(cache=True)
def _deal(key, order, devices, per, device):
    """``device[row]`` for rows taken in ``order`` (heaviest first): the device with the least load and room."""
    load = np.zeros(devices, np.int64)
    count = np.zeros(devices, np.int64)
    for i in range(order.shape[0]):
        r = order[i]
        best = -1
        for d in range(devices):
            if count[d] < per and (best < 0 or load[d] < load[best]):
                best = d
        device[r] = best
        load[best] += key[r]
        count[best] += 1
    return load


@numba.njit(cache=True)
def _swap(key, device, load, max_swaps):
    """Swap a row of the busiest device with another device's while that lowers the busiest's load below what it
    was (the best such swap each time); returns the swaps made."""
    n = key.shape[0]
    made = 0
    while made < max_swaps:
        a = 0
        for d in range(load.shape[0]):
            if load[d] > load[a]:
                a = d
        best_gain, bx, by = np.int64(0), -1, -1
        for x in range(n):
            if device[x] != a:
                continue
            for y in range(n):
                b = device[y]
                if b == a or key[y] >= key[x]:
                    continue
                delta = key[x] - key[y]
                new_b = load[b] + delta
                new_a = load[a] - delta
                top = new_a if new_a > new_b else new_b
                gain = load[a] - top
                if gain > best_gain:
                    best_gain, bx, by = gain, x, y
        if bx < 0:
            break
        b = device[by]
        delta = key[bx] - key[by]
        load[a] -= delta
        load[b] += delta
        device[bx], device[by] = b, a
        made += 1
    return made


def balance_key(work, tokens, ctx: int) -> np.ndarray:
    """int64 key per row: ``work`` first, ``tokens`` (at most ``ctx`` a row) to break ties, so sums over rows
    compare as (work, tokens) pairs (``work`` alone where those sums would not fit int64)."""
    work = np.asarray(work, np.int64)
    tokens = np.asarray(tokens, np.int64)
    scale = int(work.shape[0]) * (int(ctx) + 1)  # more than any device's tokens
    if (int(work.sum()) + 1) * scale >= 1 << 62:  # sums would overflow int64: work alone
        return work.copy()
    return work * np.int64(scale) + tokens


def balance_order(key, devices: int) -> np.ndarray:
    """int64 permutation ``p`` of a batch's rows: position ``i`` of the balanced batch holds row ``p[i]``, and device
    ``d`` of ``devices`` (rows ``[d * R, (d + 1) * R)``, R = rows / devices) gets rows of near-equal summed ``key``
    (:func:`balance_key`); its busiest device is never busier than with the rows as given (then ``p`` is the
    identity). Each device's rows keep their order in the batch. Deterministic: a function of ``key`` and ``devices``
    alone."""
    key = np.ascontiguousarray(key, dtype=np.int64)
    rows = key.shape[0]
    devices = check_int(devices, "devices", minimum=1)
    if rows % devices:
        raise ValueError(f"a batch of {rows} rows does not divide over {devices} devices")
    per = rows // devices
    if devices == 1 or per == 0:
        return np.arange(rows, dtype=np.int64)
    order = np.lexsort((np.arange(rows), -key)).astype(np.int64)  # heaviest first, ties by position
    device = np.empty(rows, np.int64)
    load = _deal(key, order, devices, per, device)
    _swap(key, device, load, SWAPS_PER_ROW * rows)
    if load.max() >= device_loads(key, devices).max():  # never busier than the order as drawn
        return np.arange(rows, dtype=np.int64)
    return np.lexsort((np.arange(rows), device)).astype(np.int64)  # by device, then by position in the batch


def balance_group(key, batches: int, devices: int) -> np.ndarray:
    """int64 permutation ``p`` of the rows of ``batches`` global batches of equal height laid back to back (batch
    b's rows at ``[b H, (b + 1) H)``): position ``i`` of the arrangement holds row ``p[i]``, batch b its positions
    ``[b H, (b + 1) H)``, each batch's devices contiguous slices of ``H / devices`` rows. Where one batch's heaviest
    rows exceed a device's share, no order inside it is balanced; across the group they are paired with light rows
    of the others: the rows are dealt to ``batches * devices`` slices of equal row counts (:func:`balance_order`:
    LPT, then swaps), and the slices, heaviest first, go ``devices`` at a time to the batches, so each batch's
    slices carry near-equal work (a batch's level may differ from another's); where that sums to a higher busiest
    over mean over the batches (:func:`group_busiest`) than balancing each batch alone (one row a device, few heavy
    rows), each batch keeps its rows. The rows of the group are delivered once each, in other batches than drawn:
    the batches' contents change (the shuffle within the group).
    ``batches=1`` is :func:`balance_order`. Deterministic: a function of ``key``, ``batches`` and ``devices``."""
    key = np.ascontiguousarray(key, dtype=np.int64)
    batches = check_int(batches, "batches", minimum=1)
    devices = check_int(devices, "devices", minimum=1)
    if key.shape[0] % (batches * devices):
        raise ValueError(f"{key.shape[0]} rows do not divide into {batches} batches over {devices} devices")
    if batches == 1:
        return balance_order(key, devices)
    per = key.shape[0] // (batches * devices)
    slices = balance_order(key, batches * devices).reshape(batches * devices, per)
    loads = key[slices].sum(axis=1)
    heaviest_first = np.lexsort((np.arange(loads.shape[0]), -loads))
    exchanged = slices[heaviest_first].reshape(-1)
    height = key.shape[0] // batches
    alone = np.concatenate(
        [balance_order(key[b * height : (b + 1) * height], devices) + b * height for b in range(batches)]
    )
    return (
        exchanged
        if group_busiest(key[exchanged], batches, devices) <= group_busiest(key[alone], batches, devices)
        else alone
    )


def group_busiest(values, batches: int, devices: int) -> float:
    """The sum over ``batches`` batches laid back to back of each one's busiest device's ``values`` over its mean
    device's (:func:`busiest_over_mean`)."""
    v = np.asarray(values)
    return float(sum(busiest_over_mean(b, devices) for b in v.reshape(batches, -1)))


def device_loads(values, devices: int) -> np.ndarray:
    """The sum of ``values`` (one per row, in batch order) over each device's contiguous slice: (devices,)."""
    v = np.asarray(values)
    return v.reshape(devices, -1).sum(axis=1)


def busiest_over_mean(values, devices: int) -> float:
    """The busiest device's summed ``values`` over the mean device's (1.0: balanced; 1.0 when there is no work)."""
    loads = device_loads(values, devices).astype(np.float64)
    mean = float(loads.mean())
    return float(loads.max()) / mean if mean > 0 else 1.0


def least_busiest(values, devices: int) -> float:
    """A lower bound on the busiest device's summed ``values`` over the mean device's, for any order of the rows:
    exact at one row a device (the heaviest row) and at two (the heaviest sum of sorted rows i and n - 1 - i, the
    best pairing, which :func:`balance_order` reaches); above, the heaviest row or the mean (1.0)."""
    v = np.sort(np.asarray(values, np.int64))
    mean = float(v.sum()) / devices
    if mean <= 0:
        return 1.0
    per = v.shape[0] // devices
    top = float((v + v[::-1]).max()) if per == 2 else float(v.max())
    return max(1.0, top / mean)
