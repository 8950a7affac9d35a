"""Per-token loss weights of a packed batch (float32, 0 where ``loss_mask`` is 0), so the objective does not depend on
how documents were packed; divide the weighted loss sum by the *global* weight sum. ``token``: every target token
weighs 1. ``document``: every piece (a run of one non-zero segment id in a row; a document split across rows is one
a row) weighs 1, its ``n`` target tokens ``1 / n`` each; a one-token piece weighs nothing.
"""

from __future__ import annotations

import numba
import numpy as np

from datatools.base.checks import check_choice, short_repr

LOSS_WEIGHTINGS = ("none", "token", "document")
WEIGHTS_KEY = "loss_weights"  # float32 (rows, ctx): each target token's weight
SUM_KEY = "loss_weight_sum"  # float32 (rows,): each row's weight sum (summed over the global batch: the denominator)


@numba.njit(cache=True, nogil=True)
def _document_weights(seg, mask, out, sums):
    """Per row: each run of one non-zero segment id shares weight 1 over its masked tokens (two passes per run)."""
    rows, n = seg.shape
    for r in range(rows):
        total = 0.0
        t = 0
        while t < n:
            s = seg[r, t]
            end = t + 1
            while end < n and seg[r, end] == s:
                end += 1
            count = 0
            if s != 0:
                for u in range(t, end):
                    if mask[r, u] != 0:
                        count += 1
            w = np.float32(1.0 / count) if count else np.float32(0.0)
            for u in range(t, end):
                out[r, u] = w if mask[r, u] != 0 else np.float32(0.0)
            if count:
                total += 1.0
            t = end
        sums[r] = total


def loss_weights(segment_ids: np.ndarray, loss_mask: np.ndarray, weighting: str) -> tuple[np.ndarray, np.ndarray]:
    """(float32 weights of the batch's shape, float32 weight sum per row; a scalar for one (ctx,) row) for
    ``weighting`` ``token`` or ``document``. ValueError for another weighting or arrays of different shapes."""
    check_choice(weighting, "loss_weighting", LOSS_WEIGHTINGS[1:])
    seg, mask = np.asarray(segment_ids), np.asarray(loss_mask)
    if seg.shape != mask.shape or seg.ndim not in (1, 2):
        raise ValueError(
            f"segment_ids and loss_mask must be arrays of one shape (rows, ctx) or (ctx,); got "
            f"{short_repr(seg.shape)} and {short_repr(mask.shape)}"
        )
    shape = seg.shape
    seg2, mask2 = np.atleast_2d(seg), np.atleast_2d(mask)
    if weighting == "token":
        weights = (mask2 != 0).astype(np.float32)
        sums = weights.sum(axis=1, dtype=np.float32)
    else:
        weights = np.empty(seg2.shape, np.float32)
        sums = np.empty(seg2.shape[0], np.float32)
        _document_weights(np.ascontiguousarray(seg2), np.ascontiguousarray(mask2), weights, sums)
    return weights.reshape(shape), (sums if len(shape) == 2 else sums[0])


def add_loss_weights(batch: dict, weighting: str) -> dict:
    """A canonical batch with ``loss_weights`` and ``loss_weight_sum`` for ``weighting`` (``none``: unchanged),
    following its ``loss_mask`` (compute them after any option that changes it)."""
    check_choice(weighting, "loss_weighting", LOSS_WEIGHTINGS)
    if weighting == "none":
        return batch
    out = dict(batch)
    out[WEIGHTS_KEY], out[SUM_KEY] = loss_weights(batch["segment_ids"], batch["loss_mask"], weighting)
    return out
