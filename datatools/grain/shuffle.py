"""Epoch-aware random-access shuffles as ``grain.MapDataset`` transforms: full Feistel and windowed block."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import grain
from datatools.base.checks import check_int
from datatools.grain.batch import read_batch
from datatools.grain.schedule import EpochCache
from datatools.io.formats.plan_file import PlanFile
from datatools.io.sources.documents import DocumentSource
from datatools.kernels.packing import PackPlan
from datatools.kernels.shuffle import BlockShuffle, FeistelPermutation


class _IndexMapDataset(grain.MapDataset):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Element i of epoch e (index = e * len + i) is parent[permute(i, e) + e * len(parent)]."""

    def __init__(self, parent: grain.MapDataset):
        super().__init__(parent)
        if len(parent) < 1:
            raise ValueError("cannot shuffle an empty dataset")

    def _permute(self, positions: np.ndarray, epoch: int) -> np.ndarray:
        raise NotImplementedError

    def _parent_indices(self, indices: npt.ArrayLike) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and idx.min() < 0:
            raise IndexError(f"negative index {int(idx.min())}")
        n, out = len(self), np.empty(idx.shape[0], np.int64)
        epochs, pos = np.divmod(idx, n)
        for e in np.unique(epochs).tolist():  # one vectorized call per epoch in the request
            sel = epochs == e
            out[sel] = self._permute(pos[sel], e) + e * len(self._parent)
        return out

    def __getitem__(self, index: int | slice) -> Any:  # the parent's element, or a slice of the dataset
        if isinstance(index, slice):
            return self.slice(index)
        return self._parent[int(self._parent_indices([index])[0])]

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        elements: list[Any] = self._parent._getitems(self._parent_indices(indices).tolist())  # pylint: disable=protected-access
        return elements

    def get_batch(self, indices: Sequence[int]) -> Any:
        """Stacked elements at ``indices`` when the parent builds batches itself (packed rows)."""
        return read_batch(self._parent, self._parent_indices(indices))

    @property
    def docs(self) -> DocumentSource:
        """The parent's document source (packed rows)."""
        docs: DocumentSource = self._parent.docs
        return docs

    def pieces(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What elements ``indices`` read (packed rows: their pieces)."""
        pieces: tuple[np.ndarray, np.ndarray, np.ndarray] = self._parent.pieces(self._parent_indices(indices))
        return pieces

    def plan_rows(self, indices: Sequence[int]) -> tuple[PackPlan | PlanFile, np.ndarray]:
        """``(plan, rows)`` of elements ``indices`` (packed rows: the plan and its row ids)."""
        plan_rows: tuple[PackPlan | PlanFile, np.ndarray] = self._parent.plan_rows(self._parent_indices(indices))
        return plan_rows

    def rows_plan(self, indices: Sequence[int]) -> PackPlan:
        """Elements ``indices`` as one plan (packed rows: row ``i`` is element ``indices[i]``)."""
        plan: PackPlan = self._parent.rows_plan(self._parent_indices(indices))
        return plan


class FeistelShuffleMapDataset(_IndexMapDataset):
    """A full random permutation per epoch, O(1) per index (:class:`datatools.FeistelPermutation` of the 64-bit
    (seed, epoch))."""

    def __init__(self, parent: grain.MapDataset, *, seed: int):
        super().__init__(parent)
        self._seed = seed
        self._perms = EpochCache(keep=5)
        self._perm(0)  # validates the seed now

    def _perm(self, epoch: int) -> FeistelPermutation:
        return self._perms.get(epoch, lambda e: FeistelPermutation(len(self._parent), self._seed, epoch=e))

    def __len__(self) -> int:
        return len(self._parent)

    def _permute(self, positions: np.ndarray, epoch: int) -> np.ndarray:
        return self._perm(epoch)(positions)

    def __str__(self) -> str:
        return f"FeistelShuffleMapDataset(seed={self._seed})"


class BlockShuffleMapDataset(_IndexMapDataset):
    """Windowed block shuffle per epoch (:class:`datatools.BlockShuffle`, seeded by (seed, epoch)): each window of
    ``window_blocks`` io blocks of ``io_block_size`` records (a contiguous read) is permuted at block level and its
    records interleaved. ``shard_index``, ``shard_count``: this host's share (whole blocks of every window), as long
    as the shortest the share is in any epoch."""

    def __init__(
        self,
        parent: grain.MapDataset,
        *,
        io_block_size: int,
        window_blocks: int,
        seed: int,
        shard_index: int = 0,
        shard_count: int = 1,
    ):
        super().__init__(parent)
        shuffle = BlockShuffle(len(parent), io_block_size=io_block_size, window_blocks=window_blocks, seed=seed)
        shard_count = check_int(shard_count, "shard_count", minimum=1)
        if shard_count > 1:
            shuffle = shuffle.shard(shard_index, shard_count)
        elif check_int(shard_index, "shard_index", minimum=0) != 0:
            raise ValueError(f"shard_index {shard_index} out of range [0, 1)")
        self._shuffle = shuffle
        deficit = shuffle.num_blocks * shuffle.io_block_size - shuffle.n
        self._len = shuffle.share_length() - (deficit if shard_count > 1 else 0)
        if self._len < 1:
            raise ValueError(f"shard {shard_index} of {shard_count} holds no records")

    def __len__(self) -> int:
        return self._len

    def _permute(self, positions: np.ndarray, epoch: int) -> np.ndarray:
        permuted: np.ndarray = self._shuffle.index(positions, epoch)
        return permuted

    def __str__(self) -> str:
        return f"BlockShuffleMapDataset({self._shuffle!r})"
