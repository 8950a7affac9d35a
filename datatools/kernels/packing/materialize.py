"""Packed rows built from a plan and the documents' tokens: the canonical batch (int32 ``tokens``, ``segment_ids``,
``positions``, ``loss_mask``), one numba pass writing each output slot once, every piece checked to lie inside the
tokens and every id written to fit int32.
"""

from __future__ import annotations

import numba
import numpy as np

from datatools.base import array_pool
from datatools.base.checks import check_id, short_repr
from datatools.kernels.packing.plan import PackPlan
from datatools.kernels.packing.plan_format import row_pieces

_CANONICAL = ("tokens", "segment_ids", "positions", "loss_mask")
_WHOLE, _WHOLE_EXTENT = np.zeros(1, np.int64), 1 << 62  # a flat token array: one extent, in slot 0


def materialize(
    plan: PackPlan,
    tokens: np.ndarray,
    offsets: np.ndarray,
    rows=None,
    *,
    pad_id: int = 0,
    check_values: bool = True,
    out: dict[str, np.ndarray] | None = None,
    extents: tuple[np.ndarray, int] | None = None,
) -> dict[str, np.ndarray]:
    """Build packed rows from a flat token array, one numba pass writing every output slot once (every piece is
    checked to lie inside ``tokens`` before anything is written).

    Args:
      plan: the plan from :func:`pack_lengths`.
      tokens: 1-D array of every document's tokens back to back.
      offsets: int (num_documents + 1,): document i is ``tokens[offsets[i]:offsets[i+1]]``.
      rows: row ids to build; None for all rows.
      pad_id: token written at padding slots.
      check_values: check that ids of a dtype wider than int32 fit int32 (``False`` when the caller checked the
        whole array); negative ids are refused either way.
      out: a canonical batch to write into (four writeable C-contiguous int32 (len(rows), ctx) arrays), where the
        caller owns the buffer (not a batch Grain may still hold).
      extents: ``(slot_of, extent)`` when ``tokens`` is a slab of extents (a store reader's cache): token t is
        ``tokens[slot_of[t // extent] * extent + t % extent]``; every extent the rows touch must be held.

    Returns:
      The canonical batch (``out`` itself when given), int32 (len(rows), ctx): ``tokens``; ``segment_ids`` (1, 2,
      ... per piece of a row, 0 at padding); ``positions`` (in the document: a continuation piece counts on);
      ``loss_mask`` (1 where the next token is in the same piece).

    Raises:
      TypeError: not a :class:`PackPlan`, non-integer tokens, or a bad ``out``. IndexError: a row outside the plan.
      ValueError: a token id outside [0, 2**31 - 1], or a plan and arrays that do not match.
    """
    rows = check_plan_rows(plan, rows)
    pad_id = check_id(pad_id, "pad_id")
    tokens = np.asarray(tokens)
    offsets = np.asarray(offsets)
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
        raise TypeError(f"tokens must be a 1-D integer array, got {tokens.dtype} {tokens.shape}")
    if offsets.ndim != 1 or offsets.shape[0] < 1 or offsets.dtype.kind not in "iu":
        raise ValueError(
            f"offsets must be a 1-D integer array of num_documents + 1 values, got {offsets.dtype} {offsets.shape}"
        )
    if plan.max_doc >= offsets.shape[0] - 1:
        raise ValueError(
            f"plan refers to document {plan.max_doc} but offsets describe {offsets.shape[0] - 1} documents"
        )
    offsets = offsets.astype(np.int64, copy=False)
    batch = _output_batch(out, rows.shape[0], plan.ctx)
    if rows.shape[0] == 0:
        return batch
    slot_of, extent = (_WHOLE, _WHOLE_EXTENT) if extents is None else extents
    _check_piece_bounds(plan, rows, offsets, tokens.shape[0] if extents is None else int(offsets[-1]))
    wide = bool(check_values) and tokens.dtype.itemsize >= 4 and tokens.dtype != np.int32
    fill = (rows, plan.row_splits, plan.doc, plan.start, plan.length, plan.offset, offsets, tokens, slot_of, extent)
    _fill_checked(batch, rows, *fill, pad_id, wide)
    return batch


def check_plan_rows(plan: PackPlan, rows) -> np.ndarray:
    """``rows`` of ``plan`` as checked int64 row ids (all when None): TypeError for a plan that is not a
    :class:`PackPlan`, ValueError for non-integers, IndexError for a row outside it."""
    if not isinstance(plan, PackPlan):
        raise TypeError(f"plan must be a PackPlan from pack_lengths(), got {short_repr(plan)}")
    if rows is None:
        return np.arange(plan.num_rows)
    if type(rows) is np.ndarray and rows.dtype == np.int64 and rows.ndim == 1:
        arr = rows  # the common case, without the conversions (a few microseconds a batch)
    else:
        try:
            arr = np.asarray(rows).reshape(-1)
        except (OverflowError, ValueError, TypeError):
            raise ValueError(f"rows must be integers, got {short_repr(rows)}") from None
        if arr.size and (arr.dtype.kind not in "iu" or (arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max)):
            raise ValueError(f"rows must be integers in the int64 range, got {short_repr(rows)}")
        arr = arr.astype(np.int64, copy=False)
    bad = _first_row_outside(arr, plan.num_rows)  # one numba pass: numpy's min and max cost 2 us a batch
    if bad >= 0:
        raise IndexError(f"row {int(arr[bad])} out of range for a plan of {plan.num_rows} rows")
    return arr


def new_batch(rows: int, ctx: int) -> dict[str, np.ndarray]:
    """Four uninitialized C-contiguous int32 (rows, ctx) arrays under the canonical keys, views of one pooled array
    (faulting in a fresh 16 MiB batch costs more than filling it)."""
    return dict(zip(_CANONICAL, array_pool.empty((len(_CANONICAL), rows, ctx), np.int32)))


def _output_batch(out, batch: int, ctx: int) -> dict[str, np.ndarray]:
    """``out`` checked to be a canonical batch of ``batch`` x ``ctx`` int32 arrays, or a :func:`new_batch`."""
    if out is None:
        return new_batch(batch, ctx)
    if not isinstance(out, dict) or any(k not in out for k in _CANONICAL):
        raise TypeError(f"out must be a dict of {', '.join(_CANONICAL)} arrays, got {short_repr(out)}")
    for k in _CANONICAL:
        a = out[k]
        if (
            not isinstance(a, np.ndarray)
            or a.dtype != np.int32
            or a.shape != (batch, ctx)
            or not a.flags.c_contiguous
            or not a.flags.writeable
        ):
            raise TypeError(
                f"out[{k!r}] must be a writeable C-contiguous int32 array of shape {(batch, ctx)}, got {short_repr(a)}"
            )
    return out


def _fill_checked(batch, row_ids, *args) -> None:
    """``_fill_rows(*args, <batch's four arrays>, err)``; an id outside [0, 2**31 - 1] is a ValueError naming it."""
    err = np.zeros(3, np.int64)
    outputs = (*(batch[k] for k in _CANONICAL), err)
    if not _fill_rows(*args, *outputs):
        return
    b, where, value = (int(v) for v in err)
    tokens, wide = args[7], args[11]
    if wide:  # the id as the source holds it, before the cast to int32
        value = int(tokens[where])
        raise ValueError(
            f"tokens: token id {value} in row {int(row_ids[b])} is outside [0, 2**31 - 1] (batches are int32)"
        )
    raise ValueError(
        f"tokens: token id {value} at row {int(row_ids[b])}, position {where} (as int32) "
        f"is outside [0, 2**31 - 1]; token ids must be non-negative"
    )


@numba.njit(cache=True, nogil=True)
def _first_row_outside(rows, num_rows):
    """The index of the first row id outside [0, num_rows); -1 when none is."""
    for b in range(rows.shape[0]):
        if rows[b] < 0 or rows[b] >= num_rows:
            return b
    return -1


def _check_piece_bounds(plan: PackPlan, rows: np.ndarray, offsets: np.ndarray, num_tokens: int) -> None:
    """Every piece of ``rows`` must lie in ``[0, num_tokens)`` of the flat array."""
    q = _first_bad_piece(rows, plan.row_splits, plan.doc, plan.start, plan.length, offsets, num_tokens)
    if q >= 0:
        d = int(plan.doc[q])
        begin = int(offsets[d] + plan.start[q])
        end = begin + int(plan.length[q])
        raise ValueError(
            f"document {d}: tokens [{begin}, {end}) of the plan are "
            f"outside the token array of {num_tokens} (or past the document's offsets); the plan, "
            f"tokens and offsets do not match"
        )


@numba.njit(cache=True, nogil=True)
def _first_bad_piece(rows, row_splits, doc, start, length, offsets, num_tokens):
    """The first piece of ``rows`` not inside both its document and ``[0, num_tokens)``; -1 when all are."""
    for b in range(rows.shape[0]):
        r = rows[b]
        for q in range(row_splits[r], row_splits[r + 1]):
            begin = offsets[doc[q]] + start[q]
            end = begin + length[q]
            if begin < 0 or end > num_tokens or end > offsets[doc[q] + 1]:
                return q
    return -1


def check_token_ids(tokens: np.ndarray) -> None:
    """Token ids must be in [0, 2**31 - 1] (batches are int32); vectorized over ``tokens``."""
    if tokens.size:
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi > np.iinfo(np.int32).max:
            bad = lo if lo < 0 else hi
            raise ValueError(f"tokens: token id {bad} outside [0, 2**31 - 1] (batches are int32)")


def materialize_pieces(
    plan: PackPlan, read_pieces, rows=None, *, pad_id: int = 0, out: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Like :func:`materialize`, reading only the selected rows' pieces, once, through ``read_pieces(doc, start,
    length) -> tokens`` (the pieces back to back, one integer array; e.g.
    :meth:`datatools.io.sources.documents.ArrayDocuments.read_pieces`)."""

    def locate(doc: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flat = np.asarray(read_pieces(doc, start, length))
        if flat.ndim != 1 or flat.dtype.kind not in "iu" or flat.shape[0] != int(length.sum()):
            raise TypeError(
                f"read_pieces must return the {int(length.sum())} tokens asked for as a 1-D integer array, "
                f"got {flat.dtype} {flat.shape}"
            )
        return flat, np.cumsum(length, dtype=np.int64) - length

    return materialize_located(plan, locate, rows, pad_id=pad_id, out=out)


def materialize_located(
    plan: PackPlan, locate, rows=None, *, pad_id: int = 0, out: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Like :func:`materialize`, the selected rows' pieces found through ``locate(doc, start, length) -> (tokens,
    begin)``: piece j is ``tokens[begin[j]:begin[j] + length[j]]`` (int64 ``begin``; ``tokens`` one integer array:
    the pieces copied back to back, or a source's own array that holds them, filled from without a copy). One
    pass of the fill kernel writes every output slot once."""
    rows = check_plan_rows(plan, rows)
    pad_id = check_id(pad_id, "pad_id")
    sel, splits = row_pieces(plan.row_splits, rows)
    start, length = plan.start[sel], plan.length[sel]
    tokens, begin = locate(plan.doc[sel], start, length)
    tokens, begin = np.asarray(tokens), np.asarray(begin, np.int64)
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu" or begin.shape != length.shape:
        raise TypeError(f"locate must return a 1-D integer array and one begin a piece, got {short_repr(tokens)}")
    if length.size and (begin.min() < 0 or int((begin + length).max()) > tokens.shape[0]):
        raise ValueError(f"a located piece lies outside the {tokens.shape[0]} tokens it was located in")
    batch = _output_batch(out, rows.shape[0], plan.ctx)
    if rows.shape[0]:
        wide = tokens.dtype.itemsize >= 4 and tokens.dtype != np.int32
        local_rows, pieces = np.arange(rows.shape[0], dtype=np.int64), np.arange(sel.shape[0], dtype=np.int64)
        # piece j reads offsets[doc[j]] + start[j] = begin[j]: its own "document" j, whose offset is begin - start
        pieces_at = (local_rows, splits, pieces, start, length, plan.offset[sel], begin - start)
        _fill_checked(batch, rows, *pieces_at, tokens, _WHOLE, _WHOLE_EXTENT, pad_id, wide)
    return batch


@numba.njit(cache=True, nogil=True, inline="always")
def _fits_int32(piece):
    """Whether every id of ``piece`` (a non-empty 1-D integer array) lies in [0, 2**31 - 1]: its least and greatest
    in one reduction loop (vectorized), not numpy's ``min`` and ``max``, whose numba overloads (NaN and 0-d cases)
    cost ~0.8 s of CPU to compile on a cold cache for each token dtype, before a first batch."""
    lo = piece[0]
    hi = piece[0]
    for j in range(1, piece.shape[0]):
        lo = min(lo, piece[j])
        hi = max(hi, piece[j])
    return lo >= 0 and hi <= 2147483647


@numba.njit(cache=True, nogil=True)
def _fill_rows(
    rows,
    row_splits,
    doc,
    start,
    length,
    offset,
    offsets,
    tokens,
    slot_of,
    extent,
    pad_id,
    wide,
    out_tokens,
    segment_ids,
    positions,
    loss_mask,
    err,
):
    """Write each selected row of the (batch, ctx) int32 outputs once, each output by its own slice loop (so each
    vectorizes); tokens read through extents as in :func:`materialize` (a flat array: ``slot_of = [0]``). ``wide``:
    source ids checked to fit int32 before the cast; the ids written are checked non-negative. On a bad id: ``err`` =
    (batch row, source index (wide) or slot, id as int32) and True (later rows not built)."""
    ctx = out_tokens.shape[1]
    for b in range(rows.shape[0]):
        r = rows[b]
        t_row, s_row, p_row, m_row = out_tokens[b], segment_ids[b], positions[b], loss_mask[b]
        at = 0
        for q in range(row_splits[r], row_splits[r + 1]):
            dst, n = offset[q], length[q]
            if dst > at:  # alignment gap
                t_row[at:dst] = pad_id
                s_row[at:dst] = 0
                p_row[at:dst] = 0
                m_row[at:dst] = 0
            t, w, left = offsets[doc[q]] + start[q], dst, n
            while left > 0:  # one span per extent the piece crosses (one for a flat array)
                c = t // extent
                off = t - c * extent
                take = min(left, extent - off)
                src = slot_of[c] * extent + off
                piece = tokens[src : src + take]
                if wide and not _fits_int32(piece):
                    for j in range(take):
                        if piece[j] < 0 or piece[j] > 2147483647:
                            err[0], err[1], err[2] = b, src + j, 0
                            return True
                # A loop, not ``t_row[w:w + take] = piece``: numba's slice assignment copies the source first when
                # the two may overlap (2.4x slower at 32 x 1024); the minimum is taken in the same loop.
                t_piece = t_row[w : w + take]
                least = np.int32(0)
                for j in range(take):
                    t_piece[j] = piece[j]
                    least = min(least, t_piece[j])
                if least < 0:
                    for j in range(take):
                        if t_piece[j] < 0:
                            err[0], err[1], err[2] = b, w + j, t_piece[j]
                            return True
                t, w, left = t + take, w + take, left - take
            s_row[dst : dst + n] = q - row_splits[r] + 1
            p0 = np.int32(start[q])  # int32 arithmetic on a slice view: vectorizes (4x the int64 loop)
            p_piece = p_row[dst : dst + n]
            for j in range(n):
                p_piece[j] = p0 + np.int32(j)
            m_row[dst : dst + n] = 1
            if n > 0:
                m_row[dst + n - 1] = 0
            at = dst + n
        if at < ctx:
            t_row[at:] = pad_id
            s_row[at:] = 0
            p_row[at:] = 0
            m_row[at:] = 0
    return False
