"""Dataset decomposition and a length curriculum (Pouransari et al., NeurIPS 2024, arXiv 2405.13226; see
``docs/curriculum.md``): documents cut into pieces of K lengths ``sizes[0] < ... < sizes[K-1]`` (tokens)
(:func:`decompose`), one row a piece (:func:`curriculum_rows`), every batch of one length, the lengths drawn by a
staged schedule (:func:`curriculum_order`). Memory: 20 bytes a piece, one byte a batch per epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from datatools.base.checks import DEFAULT_ALGORITHM, as_lengths
from datatools.kernels.attention_blocks import row_tiles
from datatools.kernels.packing import PackPlan, pack_lengths
from datatools.kernels.packing.plan_format import gather_rows

GROW_P2 = "grow_p2"
_ALGORITHM = "decomposition"  # the plans' algorithm name


def check_sizes(sizes) -> np.ndarray:
    """``sizes`` as an increasing int64 array of lengths >= 1 (tokens); ValueError naming the list otherwise."""
    arr = np.asarray(sizes)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"lengths must be a non-empty list of integers; got {np.asarray(sizes).tolist()!r}")
    arr = arr.astype(np.int64)
    if arr[0] < 1 or np.any(np.diff(arr) <= 0):
        raise ValueError(f"lengths must be increasing and >= 1; got {arr.tolist()}")
    return arr


@numba.njit(cache=True)
def _cut(fill, lengths, sizes, doc, start, length, size):
    """How many pieces :func:`decompose` cuts, written to (doc, start, length, size) when ``fill``."""
    j = 0
    for i in range(lengths.shape[0]):
        left = lengths[i]
        at = 0
        k = sizes.shape[0] - 1
        while left >= sizes[0]:
            while sizes[k] > left:
                k -= 1
            if fill:
                doc[j], start[j], length[j], size[j] = i, at, sizes[k], k
            at += sizes[k]
            left -= sizes[k]
            j += 1
        if left > 0:
            if fill:
                doc[j], start[j], length[j], size[j] = i, at, left, -1
            j += 1
    return j


@dataclass(frozen=True)
class Pieces:
    """Pieces of documents: piece ``j`` is tokens ``[start[j], start[j] + length[j])`` of document ``doc[j]``;
    ``size[j]`` is the index of its length in the sizes (``-1``: a remainder, shorter than the smallest)."""

    doc: np.ndarray  # int64
    start: np.ndarray  # int64
    length: np.ndarray  # int32
    size: np.ndarray  # int8


_PIECE_DTYPES = (np.int64, np.int64, np.int32, np.int8)


def decompose(lengths, sizes) -> Pieces:
    """Every document of ``lengths`` (tokens) cut into pieces of the ``sizes`` (increasing, tokens): the largest
    size that fits, again and again, then a remainder shorter than ``sizes[0]``; the pieces tile each document, in
    document order, then token order."""
    lengths = as_lengths(lengths)
    sizes = check_sizes(sizes)
    if sizes.shape[0] > 127:
        raise ValueError(f"at most 127 lengths; got {sizes.shape[0]}")
    n = _cut(False, lengths, sizes, *(np.empty(0, t) for t in _PIECE_DTYPES))
    pieces = Pieces(*(np.empty(n, t) for t in _PIECE_DTYPES))
    _cut(True, lengths, sizes, pieces.doc, pieces.start, pieces.length, pieces.size)
    return pieces


@dataclass(frozen=True)
class CurriculumRows:
    """The rows of every length (:func:`curriculum_rows`): ``sizes`` (tokens, increasing), ``rows_per_batch``
    (``tokens_per_batch // sizes[k]``), ``plans`` (a :class:`~datatools.kernels.packing.PackPlan` per length, ``ctx =
    sizes[k]``: one-piece rows, then packed remainders) and ``pack_length`` (tokens: where remainders were packed)."""

    sizes: np.ndarray
    rows_per_batch: np.ndarray
    plans: tuple[PackPlan, ...]
    pack_length: int

    @property
    def batches(self) -> np.ndarray:
        """int64 (K,): global batches of each length per epoch (the shortest's last one may be short)."""
        rows = np.asarray([p.num_rows for p in self.plans], np.int64)
        return -(-rows // self.rows_per_batch)

    @property
    def tokens(self) -> int:
        return int(sum(p.kept_tokens for p in self.plans))

    @property
    def slots(self) -> int:
        """Token slots of every batch of an epoch (``batches x tokens_per_batch``): tokens plus padding."""
        return int((self.batches * self.rows_per_batch * self.sizes).sum())


PACK_PADDING = 0.01  # the most padding the remainders' rows may have when the length they go to is chosen


def _concat_rows(ctx: int, parts: list[PackPlan]) -> PackPlan:
    """One plan of ``ctx``-token rows: the rows of ``parts``, in order."""
    splits = [np.zeros(1, np.int64)]
    at = 0
    for p in parts:
        splits.append(at + p.row_splits[1:])
        at += p.num_pieces
    doc, start, length = (np.concatenate([getattr(p, f) for p in parts]) for f in ("doc", "start", "length"))
    return PackPlan.of_rows(ctx, 1, np.concatenate(splits), doc, start, length, _ALGORITHM)


def _packed(ctx: int, doc, start, length) -> PackPlan:
    """Remainders (doc, start, length) packed into rows of ``ctx`` tokens (best fit decreasing)."""
    plan = pack_lengths(np.asarray(length, np.int64), ctx, algorithm=DEFAULT_ALGORITHM)
    return PackPlan.of_rows(ctx, 1, plan.row_splits, doc[plan.doc], start[plan.doc] + plan.start, plan.length, "pack")


def pack_length_index(remainders, sizes: np.ndarray, pack_length: int | None, *, tokens: int) -> int:
    """Which length the remainders are packed into: ``pack_length`` (one of the ``sizes``, checked), or the smallest
    size whose best-fit-decreasing packing of them pads under :data:`PACK_PADDING` of all ``tokens`` slots (else the
    size padding least): longer rows pack tighter, shorter rows cost less attention."""
    if pack_length is not None:
        hit = np.flatnonzero(sizes == int(pack_length))
        if not hit.size:
            raise ValueError(f"pack_length={pack_length} must be one of the lengths {sizes.tolist()}")
        return int(hit[0])
    rem = np.asarray(remainders, np.int64)
    if rem.size == 0:
        return 0
    total = int(tokens)
    waste = []
    for k, n in enumerate(sizes.tolist()):
        plan = pack_lengths(rem, int(n), algorithm=DEFAULT_ALGORITHM)
        pad = plan.num_rows * int(n) - plan.kept_tokens
        if pad < PACK_PADDING * (total + pad):
            return k
        waste.append(pad)
    return int(np.argmin(waste))


def curriculum_rows(
    lengths, sizes, tokens_per_batch: int, *, seed: int = 0, pack_length: int | None = None
) -> CurriculumRows:
    """One row per piece of each of the ``sizes`` (tokens, increasing, each dividing ``tokens_per_batch``, the token
    slots of a global batch) for documents of ``lengths``; the remainders packed into ``pack_length`` (default
    :func:`pack_length_index`). The rows that would leave a short last batch of a length are cut again into smaller
    lengths (which: by ``seed``), so only the shortest length has a short batch."""
    sizes = check_sizes(sizes)
    tokens_per_batch = int(tokens_per_batch)
    bad = [int(s) for s in sizes if tokens_per_batch % int(s)]
    if tokens_per_batch < 1 or bad:
        raise ValueError(
            f"tokens_per_batch={tokens_per_batch} must be a positive multiple of every length (not of {bad[:1]})"
        )
    rows_per_batch = tokens_per_batch // sizes
    p = decompose(lengths, sizes)
    rest = p.size < 0
    into = pack_length_index(p.length[rest], sizes, pack_length, tokens=int(p.length.sum(dtype=np.int64)))
    plans: list[PackPlan] = []
    for k in range(sizes.shape[0]):
        mine = np.flatnonzero(p.size == k)
        parts = [PackPlan.one_piece_rows(int(sizes[k]), p.doc[mine], p.start[mine], p.length[mine], _ALGORITHM)]
        if k == into and k > 0:
            parts.append(_packed(int(sizes[k]), p.doc[rest], p.start[rest], p.length[rest]))
        plans.append(_concat_rows(int(sizes[k]), parts))
    tail = [(p.doc[rest], p.start[rest], p.length[rest])] if into == 0 else []
    rng = np.random.default_rng([int(seed), 0x5EED])
    for k in range(sizes.shape[0] - 1, 0, -1):  # longest first: its leftovers may fill the smaller lengths
        plan = plans[k]
        extra = int(plan.num_rows % rows_per_batch[k])
        if not extra:
            continue
        cut = np.zeros(plan.num_rows, bool)
        cut[rng.choice(plan.num_rows, size=extra, replace=False)] = True
        pieces = np.repeat(cut, np.diff(plan.row_splits))  # the pieces of the rows cut again
        keep = np.flatnonzero(~cut)
        plans[k] = gather_rows(
            plan.row_splits, plan.doc, plan.start, plan.length, keep, ctx=plan.ctx, align=1, algorithm=plan.algorithm
        )
        doc, start, length = plan.doc[pieces], plan.start[pieces], plan.length[pieces]
        again = decompose(length, sizes[:k])  # pieces of the pieces, in the smaller lengths (or remainders)
        for q in range(k):
            mine = np.flatnonzero(again.size == q)
            src = again.doc[mine]
            add = PackPlan.one_piece_rows(
                int(sizes[q]), doc[src], start[src] + again.start[mine], again.length[mine], _ALGORITHM
            )
            plans[q] = _concat_rows(int(sizes[q]), [plans[q], add])
        left = np.flatnonzero(again.size < 0)
        tail.append((doc[again.doc[left]], start[again.doc[left]] + again.start[left], again.length[left]))
    if tail:
        doc, start, length = (np.concatenate(x) for x in zip(*tail))
        rows = _packed(int(sizes[0]), doc.astype(np.int64), start.astype(np.int64), length)
        plans[0] = _concat_rows(int(sizes[0]), [plans[0], rows])
    return CurriculumRows(sizes, rows_per_batch.astype(np.int64), tuple(plans), int(sizes[into]))


@numba.njit(cache=True)
def _draw(left, odds, until, uniforms, out):
    """Each step t of ``out`` draws a length with probability proportional to odds[stage, k] * left[k] (batches not
    yet drawn), the stage the first whose ``until`` exceeds t / len(out); odds 1 once no length with odds is left."""
    K = left.shape[0]
    w = np.empty(K, np.float64)
    steps = out.shape[0]
    for t in range(steps):
        frac = t / steps
        s = 0
        while s < until.shape[0] - 1 and frac >= until[s]:
            s += 1
        tot = 0.0
        for k in range(K):
            w[k] = odds[s, k] * left[k]
            tot += w[k]
        if tot <= 0.0:
            for k in range(K):
                w[k] = float(left[k])
                tot += w[k]
        x = uniforms[t] * tot
        pick = K - 1
        acc = 0.0
        for k in range(K):
            acc += w[k]
            if x < acc and left[k] > 0:
                pick = k
                break
        while left[pick] == 0:  # rounding at the top end: the last length with batches left
            pick -= 1
        out[t] = pick
        left[pick] -= 1


def grow_p2_odds(k: int) -> np.ndarray:
    """The paper's Grow-P2 odds for K lengths, shortest first: ``2**(K-1), ..., 2, 1``."""
    return 2.0 ** np.arange(k - 1, -1, -1, dtype=np.float64)


def curriculum_order(batches, odds, until, *, seed: int, epoch: int, cycles: int = 1) -> np.ndarray:
    """The length index (int8) of each global batch of an epoch: every one of ``batches[k]`` batches of length k
    drawn once, each step with probability proportional to ``odds[stage, k]`` (S, K; >= 0, some > 0 a stage) times
    the batches of k not yet drawn; stage s ends at fraction ``until[s]`` of the epoch. With ``cycles`` the epoch
    runs the whole schedule that many times, each on ``1 / cycles`` of the batches. Deterministic in (seed, epoch)."""
    batches = np.asarray(batches, np.int64).reshape(-1)
    odds = np.atleast_2d(np.asarray(odds, np.float64))
    until = np.asarray(until, np.float64).reshape(-1)
    if odds.shape != (until.shape[0], batches.shape[0]):
        raise ValueError(f"odds must be (stages, lengths) = ({until.shape[0]}, {batches.shape[0]}); got {odds.shape}")
    if not np.all(np.isfinite(odds)) or odds.min() < 0 or np.any(odds.max(axis=1) <= 0):
        raise ValueError(f"odds must be finite, >= 0, and some > 0 in each stage; got {odds.tolist()}")
    if batches.min() < 0:
        raise ValueError(f"batches per length must be >= 0; got {batches.tolist()}")
    total = int(batches.sum())
    cycles = max(1, min(int(cycles), total))
    out = np.empty(total, np.int8)
    uniforms = np.random.default_rng([int(seed), int(epoch), 0xC0FFEE]).random(total)
    at = 0
    for c in range(cycles):
        share = batches * (c + 1) // cycles - batches * c // cycles
        steps = int(share.sum())
        if steps:
            _draw(share, odds, until, uniforms[at : at + steps], out[at : at + steps])
        at += steps
    return out


def row_attention_work(plan: PackPlan, block: int) -> np.ndarray:
    """int64 (rows, 2): each row's in-document causal query-key pairs and the ``block`` x ``block`` tiles holding
    them (what a block-sparse kernel visits): :func:`~datatools.kernels.attention_blocks.row_tiles` of the plan."""
    if plan.ctx % block:
        raise ValueError(f"block={block} must divide the plan's ctx={plan.ctx}")
    return row_tiles(plan.row_splits, plan.length, block, align=plan.align)


def attention_work(plan: PackPlan, block: int) -> dict[str, int]:
    """Exact attention work of a plan's rows (``align`` 1): ``pairs`` (causal query-key pairs inside documents, what
    a segment-aware kernel needs), ``document_tiles`` (``block`` x ``block`` tiles holding such pairs, what a
    block-sparse kernel visits) and ``causal_tiles`` (tiles on and under the diagonal: splash, cuDNN, flash)."""
    if plan.ctx % block:
        raise ValueError(f"block={block} must divide the plan's ctx={plan.ctx}")
    if plan.align != 1:
        raise ValueError(f"attention_work counts plans of align 1; got align={plan.align}")
    work = row_tiles(plan.row_splits, plan.length, block).sum(axis=0)
    nb = plan.ctx // block
    return {"pairs": int(work[0]), "document_tiles": int(work[1]), "causal_tiles": plan.num_rows * nb * (nb + 1) // 2}
