"""Batch formats: the canonical datatools batch as MaxText, Levanter or Hugging Face expect it (``docs/trainers.md``).

The canonical batch: int32 (batch, ctx) (or (ctx,)) ``tokens``, ``segment_ids`` (1, 2, ... per piece of a row, 0 at
padding), ``positions`` and ``loss_mask`` (1 where token t + 1 is in the same piece). Formats (:data:`FORMATS`):

* ``datatools``: the canonical batch (with any extra fields, such as attention tiles).
* ``maxtext``: ``inputs``, ``inputs_segmentation``, ``inputs_position``, ``targets`` (the next token, 0 where none),
  ``targets_segmentation`` (the target's segment id, else 0: MaxText's loss weight), ``targets_position``.
* ``levanter``: ``LmExample``'s ``tokens``, ``loss_mask`` and ``segment_ids`` 0, 1, ... per piece of a row, -1 at
  padding (as ``SequencePacker``).
* ``hf``: as ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)``: the real tokens in one row
  (``input_ids``, ``position_ids``, ``labels`` -100 where not predicted), ``cu_seq_lens_q/k``, ``max_length_q/k``.

Loss weights ride along aligned with the targets (``loss_weight`` for Levanter, plus ``loss_weight_sum`` for hf).
"""

from __future__ import annotations

import numba
import numpy as np

from datatools.base.checks import check_choice, short_repr
from datatools.kernels.loss_weights import LOSS_WEIGHTINGS, SUM_KEY, WEIGHTS_KEY, add_loss_weights

FORMATS = ("datatools", "maxtext", "levanter", "hf")
CANONICAL_KEYS = ("tokens", "segment_ids", "positions", "loss_mask")
BOUNDARY_TARGETS = ("mask", "next_document")
POSITIONS = ("restart", "continue")
IGNORE_INDEX = -100


@numba.njit(cache=True, nogil=True)
def _number_pieces(seg, positions, pieces, with_pieces):
    """:func:`number_pieces` into ``positions`` and (``with_pieces``) ``pieces``, one pass per row."""
    rows, n = seg.shape
    for r in range(rows):
        prev = 0
        first = 0
        k = -1
        for t in range(n):
            s = seg[r, t]
            if s != prev:
                first = t
                prev = s
                if s != 0:
                    k += 1
            positions[r, t] = t - first if s != 0 else 0
            if with_pieces:
                pieces[r, t] = k if s != 0 else -1


def number_pieces(segment_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions restarting at 0 in every piece, 0 at padding; piece numbers 0, 1, ... per row, -1 at padding),
    both int32 of the shape of ``segment_ids``. A piece is a run of one non-zero segment id within a row."""
    seg = np.ascontiguousarray(np.atleast_2d(segment_ids))
    positions = np.empty(seg.shape, np.int32)
    pieces = np.empty(seg.shape, np.int32)
    _number_pieces(seg, positions, pieces, True)
    shape = np.shape(segment_ids)
    return positions.reshape(shape), pieces.reshape(shape)


def restart_positions(segment_ids: np.ndarray) -> np.ndarray:
    """The positions of :func:`number_pieces` alone (what every batch with ``positions: restart`` needs: without
    the piece numbers: 0.035 instead of 0.05 CPU s for 1,224 batches of 32 x 1024)."""
    seg = np.ascontiguousarray(np.atleast_2d(segment_ids))
    positions = np.empty(seg.shape, np.int32)
    _number_pieces(seg, positions, np.empty((0, 0), np.int32), False)
    return positions.reshape(np.shape(segment_ids))


def apply_options(
    batch: dict, *, boundary_targets: str = "mask", positions: str = "restart", loss_weighting: str = "none"
) -> dict:
    """A canonical batch (the packers make ``mask`` / ``continue``) with ``boundary_targets`` (``next_document``: a
    document's last token also predicts the next one's first, as MaxText's ``ShiftData``), ``positions``
    (``restart`` from 0 in every piece, as MaxText, Grain and transformers expect) and ``loss_weighting``
    (:mod:`~datatools.kernels.loss_weights`) applied; weights the batch carries are kept unless ``next_document``
    changed the loss mask."""
    check_choice(boundary_targets, "boundary_targets", BOUNDARY_TARGETS)
    check_choice(positions, "positions", POSITIONS)
    check_choice(loss_weighting, "loss_weighting", LOSS_WEIGHTINGS)
    out = dict(batch)  # extra fields (attention tiles) ride along
    if positions == "restart":
        out["positions"] = restart_positions(batch["segment_ids"])
    if boundary_targets == "next_document":
        seg = np.asarray(batch["segment_ids"])
        out["loss_mask"] = ((seg != 0) & (_shift_left(seg) != 0)).astype(np.int32)
    if loss_weighting != "none" and (WEIGHTS_KEY not in out or boundary_targets == "next_document"):
        out = add_loss_weights(out, loss_weighting)
    return out


def _shift_left(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    out[..., :-1] = x[..., 1:]
    return out


def to_maxtext(batch: dict) -> dict:
    seg, mask = batch["segment_ids"], batch["loss_mask"] != 0
    return {
        "inputs": batch["tokens"],
        "inputs_segmentation": seg,
        "inputs_position": batch["positions"],
        "targets": np.where(mask, _shift_left(batch["tokens"]), 0).astype(batch["tokens"].dtype, copy=False),
        "targets_segmentation": np.where(mask, _shift_left(seg), 0).astype(seg.dtype, copy=False),
        "targets_position": batch["positions"],
        **({WEIGHTS_KEY: batch[WEIGHTS_KEY]} if WEIGHTS_KEY in batch else {}),
    }


def to_levanter(batch: dict) -> dict:
    return {
        "tokens": batch["tokens"],
        "loss_mask": batch["loss_mask"].astype(np.int32, copy=False),
        # Levanter numbers the segments of a row 0, 1, ... and its padding -1 (SequencePacker)
        "segment_ids": number_pieces(batch["segment_ids"])[1],
        **({"loss_weight": batch[WEIGHTS_KEY]} if WEIGHTS_KEY in batch else {}),
    }


def to_hf(batch: dict) -> dict:
    tokens = np.atleast_2d(batch["tokens"])
    seg = np.atleast_2d(batch["segment_ids"])
    pos = np.atleast_2d(batch["positions"])
    mask = np.atleast_2d(batch["loss_mask"])
    real = seg > 0
    predicted = np.zeros_like(real)
    predicted[:, 1:] = mask[:, :-1] != 0  # token t is a label when t - 1 predicts it
    labels = np.where(predicted, tokens, IGNORE_INDEX).astype(np.int32)
    pieces = number_pieces(seg)[1]
    first = real.copy()
    first[:, 1:] &= pieces[:, 1:] != pieces[:, :-1]  # a piece's first token: its number changes (each row from 0)
    starts = np.flatnonzero(first[real])
    total = int(real.sum())
    cu = np.append(starts, total).astype(np.int32)
    longest = int(np.diff(cu).max(initial=0))
    weights = {}
    if WEIGHTS_KEY in batch:
        w = np.atleast_2d(batch[WEIGHTS_KEY])
        label_w = np.zeros_like(w)
        label_w[:, 1:] = w[:, :-1]  # the weight of predicting token t sits at t - 1
        weights = {WEIGHTS_KEY: label_w[real][None, :], SUM_KEY: np.float32(w.sum(dtype=np.float32))}
    return {
        "input_ids": tokens[real][None, :].astype(np.int32, copy=False),
        "position_ids": pos[real][None, :].astype(np.int32, copy=False),
        "labels": labels[real][None, :],
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu.copy(),
        "max_length_q": longest,
        "max_length_k": longest,
        **weights,
    }


_CONVERTERS = {"datatools": lambda b: b, "maxtext": to_maxtext, "levanter": to_levanter, "hf": to_hf}


def to_format(
    batch: dict, name: str, *, boundary_targets: str = "mask", positions: str = "restart", loss_weighting: str = "none"
) -> dict:
    """Convert a canonical batch to the format ``name`` (one of :data:`FORMATS`), with the batch options
    ``boundary_targets`` (:data:`BOUNDARY_TARGETS`), ``positions`` (:data:`POSITIONS`) and ``loss_weighting``
    (:data:`~datatools.kernels.loss_weights.LOSS_WEIGHTINGS`) applied first."""
    try:
        convert = _CONVERTERS[name]
    except (KeyError, TypeError):
        raise ValueError(f"format must be one of {', '.join(map(repr, FORMATS))}; got {short_repr(name)}") from None
    missing = [k for k in CANONICAL_KEYS if k not in batch]
    if missing:
        raise ValueError(f"not a canonical datatools batch: missing {', '.join(missing)}")
    return convert(
        apply_options(batch, boundary_targets=boundary_targets, positions=positions, loss_weighting=loss_weighting)
    )
