"""Streaming packing as a Grain ``IterDataset``, over the streaming schedule's window planner."""

from __future__ import annotations

from typing import Any

import numpy as np

import grain
from datatools.base.checks import check_int, short_repr
from datatools.grain.document_blocks import document_block
from datatools.grain.streaming_schedule import plan_window
from datatools.io.sources.documents import ArrayDocuments
from datatools.kernels.packing import PackOptions


class _StreamingPackIterator(grain.DatasetIterator):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    def __init__(self, parent: grain.DatasetIterator, ds: StreamingPackIterDataset):
        super().__init__(parent)
        self._ds = ds
        self._window = 0  # windows begun: the number of the next one (its rows' order is seeded by it)
        self._window_state = None
        self._rows: dict[str, np.ndarray] | None = None
        self._num_rows = 0
        self._next_row = 0

    def _fill_window(self) -> bool:
        """Read the next window of documents and pack it; False when the parent is exhausted."""
        ds = self._ds
        while True:
            self._window_state = self._parent.get_state()
            tokens, lengths, count = [], [], 0
            while count < ds.window:  # whole elements: a document, or a block of them
                try:
                    t, n = document_block(next(self._parent), ds.feature)
                except StopIteration:
                    break
                tokens.append(t)
                lengths.append(n)
                count += n.shape[0]
            if not count:
                self._rows, self._num_rows, self._next_row = None, 0, 0
                return False
            w, self._window = self._window, self._window + 1
            source = ArrayDocuments(np.concatenate(tokens), np.concatenate(([0], np.cumsum(np.concatenate(lengths)))))
            key = [ds.seed, 0, w] if ds.shuffle_rows else None  # as epoch 0 of StreamingSchedule
            plan, order = plan_window(source.lengths(), np.arange(count, dtype=np.int64), ds.options, key)
            if plan.num_rows:
                rows = order if ds.shuffle_rows else np.arange(plan.num_rows)
                self._rows = source.pack_rows(plan, rows, pad_id=ds.pad_id)
                self._num_rows, self._next_row = plan.num_rows, 0
                return True

    def __next__(self) -> dict[str, np.ndarray]:
        while self._rows is None or self._next_row >= self._num_rows:
            if not self._fill_window():
                raise StopIteration
        r = self._next_row
        self._next_row += 1
        return {k: v[r] for k, v in self._rows.items()}

    def get_state(self) -> dict[str, Any]:
        if self._rows is not None and self._next_row < self._num_rows:
            return {"parent": self._window_state, "rows_emitted": self._next_row, "window": self._window - 1}
        return {"parent": self._parent.get_state(), "rows_emitted": 0, "window": self._window}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        self._rows, self._num_rows, self._next_row = None, 0, 0
        self._window = int(state["window"])
        if state["rows_emitted"]:
            self._fill_window()  # re-read the window (deterministic), skip the rows already emitted
            self._next_row = state["rows_emitted"]


class StreamingPackIterDataset(grain.IterDataset):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Pack a stream of documents into rows of ``ctx`` tokens, a window of documents at a time.

    For sources whose lengths are not known ahead: each window of ``window`` documents is planned with
    ``plan_window`` (as :class:`~datatools.grain.streaming_schedule.StreamingSchedule`'s epoch 0) and its rows
    emitted. Memory: one window. The state is the parent's state at the window's start, its number and the rows
    emitted; restoring re-plans the window and skips them. Elements are canonical rows: int32 arrays of shape (ctx,).

    Args:
      parent: an IterDataset of documents: 1-D token arrays, dicts holding one under ``feature``, or document
        blocks (see :class:`DocumentsMapDataset`).
      options: how each window is packed (rows of ``options.ctx`` tokens; algorithm, max_segments, align and
        overflow as :func:`datatools.pack_lengths`).
      window: documents per packing window (rounded up to whole blocks).
      feature: the dict key of the tokens when elements are dicts.
      pad_id: token id written at padding.
      shuffle_rows, seed: emit each window's rows in a random order seeded by ``seed`` (else plan order).
    """

    def __init__(
        self,
        parent: grain.IterDataset,
        options: PackOptions,
        *,
        window: int = 1024,
        feature: str = "tokens",
        pad_id: int = 0,
        shuffle_rows: bool = True,
        seed: int = 0,
    ):
        super().__init__(parent)
        self.shuffle_rows = bool(shuffle_rows)
        self.seed = check_int(seed, "seed", minimum=0)
        if not isinstance(options, PackOptions):
            raise TypeError(f"options must be a PackOptions (datatools.kernels.packing); got {short_repr(options)}")
        self.options = options
        self.ctx, self.algorithm = self.options.ctx, self.options.algorithm
        self.window = check_int(window, "window", minimum=1)
        self.feature = feature
        self.pad_id = int(pad_id)

    def __iter__(self) -> _StreamingPackIterator:
        return _StreamingPackIterator(self._parent.__iter__(), self)

    def __str__(self) -> str:
        return f"StreamingPackIterDataset(ctx={self.ctx}, window={self.window}, algorithm={self.algorithm})"
