"""The order documents are read in when a pipeline mixes several sources: an interleave by weight, per epoch.

:class:`MixtureOrder` stands where one source's :class:`~datatools.grain.host_batches.DocumentOrder` stands,
computed from the documents' counts alone. Source k's document i is ``offsets[k] + i``, each source keeps its
own shuffle, and positions draw from sources by the weighted interleave of :mod:`datatools.kernels.mixture`.
Epochs (``mode``, docs/mixtures.md): ``sample`` (``epoch_documents`` draws; source k's ``r``-th draw over all
epochs is document ``r mod n_k`` of its own epoch ``r // n_k``) or ``exhaust`` (every document once, the
others renormalized when a source runs out). ``history``: ``[(position, weights), ...]``, positions counted
over all epochs (``e * n + p``), each entry's weights holding from its position on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from datatools.base.checks import check_choice, check_int
from datatools.grain.host_batches import DocumentOrder
from datatools.grain.schedule import EpochCache
from datatools.kernels.mixture import Segment, draw, exhaust_segments, split_ratios

MIX_MODES = ("sample", "exhaust")


def source_seed(seed: int, k: int) -> int:
    """The seed of source k's own shuffle (SeedSequence of (seed, k))."""
    return int(np.random.SeedSequence([int(seed), int(k)]).generate_state(2, np.uint64)[0])


class MixtureOrder:
    """Documents of several sources of ``sizes`` documents, interleaved by weight (see the module docstring).

    Args:
      history: ``[(position, weights), ...]``, the first at position 0; weights one per source, > 0.
      mode: ``sample`` or ``exhaust``.
      epoch_documents: positions per epoch when sampling (default, and with ``exhaust``: ``sum(sizes)``).
      shuffle, seed, io_block_size, window_blocks: each source's own order (as :class:`DocumentOrder`).
    """

    def __init__(
        self,
        sizes: npt.ArrayLike,
        history: Sequence[Sequence[Any]],  # (position, weights) pairs
        *,
        mode: str = "sample",
        epoch_documents: int | None = None,
        shuffle: str = "full",
        seed: int = 0,
        io_block_size: int = 64,
        window_blocks: int = 1024,
    ):
        self.sizes = np.asarray(sizes, np.int64).reshape(-1)
        self.mode = check_choice(mode, "mixture epoch", MIX_MODES)
        total = int(self.sizes.sum())
        if mode == "exhaust" or epoch_documents is None:
            self.n = check_int(total, "documents of all sources", minimum=1)
        else:
            self.n = check_int(epoch_documents, "mixture.epoch_documents", minimum=1)
        self.history = [(int(p), np.asarray(w, np.float64).reshape(-1)) for p, w in history]
        if not self.history or self.history[0][0] != 0:
            raise ValueError("a mixture's weight history must start at position 0")
        for p, w in self.history:
            if w.shape != self.sizes.shape or not np.all(np.isfinite(w)) or np.any(w <= 0):
                raise ValueError(
                    f"mixture weights at position {p} must be {self.sizes.shape[0]} numbers > 0; got {w.tolist()}"
                )
        if mode == "sample" and np.any(self.sizes == 0):
            raise ValueError(f"source {int(np.flatnonzero(self.sizes == 0)[0])} of the mixture holds no documents")
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes)))
        self.seed = int(seed)
        self.orders = [
            DocumentOrder(
                int(n), shuffle, seed=source_seed(seed, k), io_block_size=io_block_size, window_blocks=window_blocks
            )
            if n
            else None
            for k, n in enumerate(self.sizes)
        ]
        self.same_documents_every_epoch = mode == "exhaust"
        self._segments = EpochCache(keep=5)
        if mode == "sample":
            self._global = self._sample_segments()

    def _offset(self, start: int) -> int:
        """The seeded shift of the interleave of a segment starting at ``start`` (< 2**16)."""
        return int(np.random.SeedSequence([self.seed, int(start), 0x6D6978]).generate_state(1)[0] & 0xFFFF)

    def _sample_segments(self) -> list[Segment]:
        out: list[Segment] = []
        counts = np.zeros_like(self.sizes)
        for p, w in self.history:
            if out:
                counts = out[-1].counts_at(p)
            out.append(Segment(p, counts, split_ratios(w), self._offset(p)))
        return out

    def _exhaust_segments(self, epoch: int) -> list[Segment]:
        first, end = epoch * self.n, (epoch + 1) * self.n
        in_force = [w for p, w in self.history if p <= first][-1]
        switches = [(0, in_force)] + [(p - first, w) for p, w in self.history if first < p < end]
        return exhaust_segments(self.sizes, switches, lambda s: self._offset(first + s))

    def draws(self, positions: npt.ArrayLike, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(source, rank)`` of positions of ``epoch``: the source each draws from and its draw number there
        (``sample``: counted over all epochs; ``exhaust``: within the epoch)."""
        positions = np.asarray(positions, np.int64).reshape(-1)
        if self.mode == "sample":
            return draw(self._global, positions + epoch * self.n)
        return draw(self._segments.get(epoch, self._exhaust_segments), positions)

    def __call__(self, positions: npt.ArrayLike, epoch: int) -> np.ndarray:
        source, rank = self.draws(positions, epoch)
        out = np.empty(source.shape[0], np.int64)
        for k in np.unique(source).tolist():  # one vectorized lookup per source and source epoch
            sel = np.flatnonzero(source == k)
            n = int(self.sizes[k])
            if self.mode == "exhaust":
                out[sel] = self.orders[k](rank[sel], epoch) + self.offsets[k]
                continue
            own_epoch, local = np.divmod(rank[sel], n)
            for e in np.unique(own_epoch).tolist():
                at = own_epoch == e
                out[sel[at]] = self.orders[k](local[at], e) + self.offsets[k]
        return out
