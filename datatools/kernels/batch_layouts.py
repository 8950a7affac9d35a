"""Batch formats: the canonical datatools batch seen as MaxText, Levanter or Hugging Face expect it.

The canonical batch (every packer and bucketer in datatools produces it) holds int32
arrays of shape (batch, ctx), or (ctx,) for one row:

* ``tokens``;
* ``segment_ids``: 1, 2, ... per document piece within a row, 0 at padding;
* ``positions``: 0-based within each document (a continuation piece counts on);
* ``loss_mask``: 1 where token t's next token t + 1 is in the same piece. It is 0 at
  padding and at each piece's last token, so no target crosses a document.

Two options change what a batch says before it is laid out (:func:`apply_options`):

``boundary_targets``
    ``mask`` (default): a document's last token predicts nothing, so the loss of a
    packed row is the sum of its documents' own losses (packed loss == unpacked
    loss). ``next_document``: as MaxText's ``ShiftData`` does, the last token of a
    document also predicts the first token of the document after it in the same row
    (a prediction made without seeing that document: noise, but what a MaxText run
    has always trained on).
``positions``
    ``restart`` (default): every piece counts from 0, as MaxText's chunking and
    Grain's packers do and as transformers needs to find the boundaries of a
    padding-free batch; positions stay below ctx, so a learned position table is
    never indexed out of range. With rotary embeddings attention within a piece is
    the same either way. ``continue``: a continuation piece of a document split
    across rows counts on from its offset in the document.
``loss_weighting``
    ``none`` (default): no weights, the layouts as they always were. ``token`` or
    ``document``: the batch also carries float32 ``loss_weights`` per target token and
    ``loss_weight_sum`` per row (:mod:`datatools.kernels.loss_weights`), computed from
    the final ``loss_mask``; each layout carries them as noted below.

Formats (:data:`FORMATS`):

``datatools``
    the canonical batch (with any extra fields, such as attention tiles).
``maxtext``
    what MaxText's Grain pipeline feeds its train step: ``inputs``,
    ``inputs_segmentation``, ``inputs_position`` (tokens, segment ids, positions);
    ``targets`` (the next token, 0 where there is none), ``targets_segmentation``
    (the next token's segment id where it is a target, else 0: MaxText weights the
    loss by ``targets_segmentation != 0``) and ``targets_position``; with weights,
    ``loss_weights`` (aligned with ``targets``; stock MaxText reads no per-token weight,
    see ``docs/loss-weighting.md``).
``levanter``
    the fields of Levanter's ``LmExample``: ``tokens``, ``loss_mask`` (int32, 1 at
    t where token t + 1 is predicted, as ``LmExample.causal`` makes it) and
    ``segment_ids`` numbered as Levanter's ``SequencePacker`` numbers them: 0, 1, ...
    per piece of a row and -1 at padding (for ``AttentionMask.with_segment_ids``);
    with weights, ``loss_weight`` (float32, Levanter's own per-position loss weight).
``hf``
    padding-free, as transformers' ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)``
    gives it: the real tokens of the whole batch concatenated into one row:
    ``input_ids``, ``position_ids`` and ``labels`` (shape (1, real tokens); ``labels``
    is -100 where the token is not predicted, e.g. at every piece's first token,
    because Hugging Face models shift labels themselves), plus ``cu_seq_lens_q`` /
    ``cu_seq_lens_k`` (int32 piece boundaries) and ``max_length_q`` / ``max_length_k``
    (the longest piece, tokens), the flash-attention keyword arguments. With
    ``positions: restart`` transformers also finds the pieces from ``position_ids``
    (sdpa and eager attention). Its shape changes from batch to batch. With weights,
    ``loss_weights`` aligned with ``labels`` (the weight of predicting each label) and
    ``loss_weight_sum`` (the batch's, a scalar): transformers' built-in loss takes neither.
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
def _number_pieces(seg, positions, pieces):
    """One pass per row: ``positions`` from 0 in every piece (0 at padding) and ``pieces`` 0, 1, ... per piece of
    the row (-1 at padding). A piece starts where the segment id changes (padding ends one)."""
    rows, n = seg.shape
    for r in range(rows):
        prev = 0
        p = 0
        k = -1
        for t in range(n):
            s = seg[r, t]
            if s == 0:
                positions[r, t] = 0
                pieces[r, t] = -1
                prev = 0
                continue
            if s != prev:
                p = 0
                k += 1
                prev = s
            positions[r, t] = p
            pieces[r, t] = k
            p += 1


def number_pieces(segment_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions restarting at 0 in every piece, 0 at padding; piece numbers 0, 1, ... per row, -1 at padding),
    both int32 of the shape of ``segment_ids``. A piece is a run of one non-zero segment id within a row."""
    seg = np.ascontiguousarray(np.atleast_2d(segment_ids))
    positions = np.empty(seg.shape, np.int32)
    pieces = np.empty(seg.shape, np.int32)
    _number_pieces(seg, positions, pieces)
    shape = np.shape(segment_ids)
    return positions.reshape(shape), pieces.reshape(shape)


def next_document_mask(segment_ids: np.ndarray) -> np.ndarray:
    """The loss mask of ``boundary_targets: next_document``: 1 at t where tokens t and t + 1 are both real."""
    seg = np.atleast_2d(segment_ids)
    mask = np.zeros(seg.shape, dtype=np.int32)
    mask[:, :-1] = (seg[:, :-1] != 0) & (seg[:, 1:] != 0)
    return mask.reshape(np.shape(segment_ids))


def apply_options(
    batch: dict, *, boundary_targets: str = "mask", positions: str = "restart", loss_weighting: str = "none"
) -> dict:
    """A canonical batch with ``boundary_targets``, ``positions`` and ``loss_weighting`` applied (see the module
    docstring).

    The canonical batch the packers make is ``mask`` / ``continue``; anything else is computed here, vectorized
    over the whole batch. Weights the batch already carries (the loader's) are kept unless ``next_document``
    changed the loss mask they follow.
    """
    check_choice(boundary_targets, "boundary_targets", BOUNDARY_TARGETS)
    check_choice(positions, "positions", POSITIONS)
    check_choice(loss_weighting, "loss_weighting", LOSS_WEIGHTINGS)
    out = dict(batch)  # extra fields (attention tiles) ride along
    if positions == "restart":
        out["positions"] = number_pieces(batch["segment_ids"])[0]  # from 0 in every piece
    if boundary_targets == "next_document":
        out["loss_mask"] = next_document_mask(batch["segment_ids"])
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
