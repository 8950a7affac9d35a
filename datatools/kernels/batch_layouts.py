"""Batch formats: the canonical datatools batch seen as MaxText, Levanter or Hugging Face expect it.

The canonical batch (every packer and bucketer in datatools produces it) holds int32
arrays of shape (batch, ctx), or (ctx,) for one row:

* ``tokens``;
* ``segment_ids``: 1, 2, ... per document piece within a row, 0 at padding;
* ``positions``: 0-based within each document (a continuation piece counts on);
* ``loss_mask``: 1 where token t's next token t + 1 is in the same piece. It is 0 at
  padding and at each piece's last token, so no target crosses a document.

Formats (:data:`FORMATS`):

``datatools``
    the canonical batch as is.
``maxtext``
    ``inputs``, ``inputs_segmentation``, ``inputs_position`` (the tokens, segment
    ids, positions); ``targets`` (the next token, 0 where there is none),
    ``targets_segmentation`` (the segment id where a target exists, else 0: MaxText
    weights the loss by ``targets_segmentation != 0``) and ``targets_position``.
``levanter``
    ``tokens``, ``loss_weight`` (float32, the loss mask: weight of predicting
    token t + 1 at t) and ``segment_ids`` (for ``AttentionMask.with_segment_ids``).
``hf``
    padding-free, as ``DataCollatorWithFlattening`` gives it: the real tokens of the
    whole batch concatenated into one row: ``input_ids``, ``position_ids`` and
    ``labels`` (shape (1, real tokens); ``labels`` is -100 where the token is not
    predicted, that is at every piece's first token, because Hugging Face models
    shift labels themselves), plus ``cu_seqlens`` (int32, piece boundaries, for
    flash-attention varlen kernels) and ``max_seqlen``. Its shape changes from batch
    to batch.
"""

from __future__ import annotations

import numpy as np

from datatools.kernels.validate import short_repr

FORMATS = ("datatools", "maxtext", "levanter", "hf")
CANONICAL_KEYS = ("tokens", "segment_ids", "positions", "loss_mask")
IGNORE_INDEX = -100


def _next_token(tokens: np.ndarray, loss_mask: np.ndarray) -> np.ndarray:
    nxt = np.zeros_like(tokens)
    np.multiply(tokens[..., 1:], loss_mask[..., :-1] != 0, out=nxt[..., :-1], casting="unsafe")
    return nxt


def to_maxtext(batch: dict) -> dict:
    seg, mask = batch["segment_ids"], batch["loss_mask"]
    return {
        "inputs": batch["tokens"],
        "inputs_segmentation": seg,
        "inputs_position": batch["positions"],
        "targets": _next_token(batch["tokens"], mask),
        "targets_segmentation": np.where(mask != 0, seg, 0).astype(seg.dtype, copy=False),
        "targets_position": batch["positions"],
    }


def to_levanter(batch: dict) -> dict:
    return {
        "tokens": batch["tokens"],
        "loss_weight": batch["loss_mask"].astype(np.float32),
        "segment_ids": batch["segment_ids"],
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
    # A piece is a run of one segment id within one row.
    key = (np.arange(seg.shape[0], dtype=np.int64)[:, None] * (int(seg.max(initial=0)) + 1) + seg)[real]
    starts = np.flatnonzero(np.diff(key, prepend=-1) != 0)
    total = int(key.shape[0])
    cu = np.append(starts, total).astype(np.int32)
    return {
        "input_ids": tokens[real][None, :].astype(np.int32, copy=False),
        "position_ids": pos[real][None, :].astype(np.int32, copy=False),
        "labels": labels[real][None, :],
        "cu_seqlens": cu,
        "max_seqlen": int(np.diff(cu).max(initial=0)),
    }


_CONVERTERS = {"datatools": lambda b: {k: b[k] for k in CANONICAL_KEYS}, "maxtext": to_maxtext,
               "levanter": to_levanter, "hf": to_hf}


def to_format(batch: dict, name: str) -> dict:
    """Convert a canonical batch to the format ``name`` (one of :data:`FORMATS`)."""
    try:
        convert = _CONVERTERS[name]
    except KeyError:
        raise ValueError(f"format must be one of {', '.join(map(repr, FORMATS))}; got {short_repr(name)}") from None
    missing = [k for k in CANONICAL_KEYS if k not in batch]
    if missing:
        raise ValueError(f"not a canonical datatools batch: missing {', '.join(missing)}")
    return convert(batch)
