"""The rows Levanter asks for, read from a datatools pipeline: the Levanter-free half of
:mod:`datatools.integrations.levanter`. Element ``i`` is row ``i % B`` of global batch ``i // B``; each run of
consecutive rows asked for is read once, so each host reads only its own rows. Levanter asks for a host's rows batch
after batch: each run of rows ``[lo, hi)`` is walked in batch order by one
:class:`~datatools.grain.host_reader.BatchWalk`, read and built ahead from the batch asked for (a batch asked for
out of order starts a new walk there).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from datatools.base.checks import MAX_VOCAB, check_int, check_token_ids
from datatools.grain.host_reader import BUILD_AHEAD, BatchWalk, prefetcher
from datatools.kernels.batch_layouts import to_format
from datatools.pipeline import ShardConfig, build_canonical
from datatools.pipeline.config import ConfigLike, as_config
from datatools.pipeline.sources import OpenedDocuments

__all__ = ["PipelineRows", "runs", "TESTED_LEVANTER", "INSTALL_LEVANTER"]

TESTED_LEVANTER = "0.2.227.dev40316220070"  # the marin-levanter release it is tested on (Makefile: LEVANTER_VERSION)
INSTALL_LEVANTER = (  # its Python: on 3.11 pip resolves a much older marin-levanter
    f"Levanter {TESTED_LEVANTER} needs Python 3.12: in a Python 3.12 venv, "
    f"pip install 'marin-levanter=={TESTED_LEVANTER}', then datatools into the same venv"
)

WALKS_KEPT = 8  # runs of rows walked at once (a host reads one or a few runs of each batch)


def runs(rows: np.ndarray) -> list[tuple[int, int]]:
    """The runs ``[lo, hi)`` of consecutive values in sorted, distinct ``rows`` (int array), in order."""
    rows = np.asarray(rows, np.int64)
    if rows.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [rows.size]))
    return [(int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(starts.tolist(), ends.tolist())]


class PipelineRows:
    """A datatools pipeline's global batches as numbered rows in the ``levanter`` layout, read a few at a time.

    ``pipeline``: a :class:`~datatools.pipeline.PipelineConfig`, a mapping or a YAML path (``shard`` and ``workers``
    ignored); ``documents``: an opened document source to use instead of ``source.path``. It survives
    ``copy.deepcopy`` and pickling (Levanter deep-copies its config to log it): a deep copy shares the built pipeline.
    ``build_ahead``: batches of each run of rows built ahead of Levanter's asking (0: each built when asked).
    ``vocab_size``: the model's vocabulary; every row read is checked against it (an id at or above it would index
    past the embedding), None: not checked.

    Raises:
      ValueError: a config in another trainer's format, or one whose rows have several lengths; on a read, a token
        id at or above ``vocab_size``.
    """

    def __init__(
        self,
        pipeline: ConfigLike,
        *,
        documents: OpenedDocuments | None = None,
        build_ahead: int = BUILD_AHEAD,
        vocab_size: int | None = None,
    ):
        if vocab_size is not None:
            vocab_size = check_int(vocab_size, "vocab_size", minimum=1, maximum=MAX_VOCAB)
        self.vocab_size = vocab_size
        cfg = as_config(pipeline)
        if cfg.format not in ("datatools", "levanter"):
            raise ValueError(
                f"config: format {cfg.format!r} is for another trainer; Levanter reads rows in the "
                f"'levanter' layout (leave format out or set it to levanter)"
            )
        self.config = cfg.replace(format="levanter", shard=ShardConfig(index=0, count=1), workers=0)
        built = build_canonical(self.config, documents)
        lengths = {t for _, t in built.shapes}
        if len(lengths) != 1:
            raise ValueError(
                f"config: Levanter trains on rows of one length; this pipeline makes rows of {sorted(lengths)} tokens"
            )
        self.seq_len = lengths.pop()
        self.batch_size = int(self.config.batch_size)
        self.build_ahead = int(build_ahead)
        self._batches = built.batches  # global batch numbers -> (epoch, batch within the epoch), and the count
        self._schedule = built.schedule  # schedule.read(epoch, j, lo, hi): rows [lo, hi) of global batch j
        self._lock = threading.Lock()
        self._walks: dict[tuple[int, int], BatchWalk[dict[str, np.ndarray]]] = {}  # by run of rows, the oldest first
        self.reads: list[tuple[int, int, int]] = []  # (global batch, lo, hi) of every run read, in order

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the lock, the walks and the record of reads (the schedule and source pickle their own
        state)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "reads", "_walks")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._walks = {}
        self.reads = []

    def _walk(self, j: int, lo: int, hi: int) -> BatchWalk[dict[str, np.ndarray]]:
        """Rows ``[lo, hi)`` of global batches ``j, j + 1, ...``, read and built ahead."""
        batches, schedule = self._batches, self._schedule

        def build(k: int) -> dict[str, np.ndarray]:
            epoch, i = batches.locate(k)
            return schedule.read(epoch, i, lo, hi)

        prefetch = prefetcher(schedule, lambda k: (*batches.locate(k), lo, hi)) if batches.reads_ahead else None
        stop = len(batches) if self.is_finite() else None
        return BatchWalk(build, start=j, stop=stop, prefetch=prefetch, build_ahead=self.build_ahead)

    def __deepcopy__(self, memo: dict[int, object]) -> PipelineRows:
        """A new reader over the same built pipeline (read only), with its own lock and record of reads."""
        return copy.copy(self)  # through __getstate__ / __setstate__

    def is_finite(self) -> bool:
        return self.config.num_epochs is not None

    def __len__(self) -> int:
        """Rows over every epoch (``len(batches) * batch_size``; a very large number when repeating forever)."""
        return len(self._batches) * self.batch_size

    def read(self, j: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Rows ``[lo, hi)`` of global batch ``j`` in the ``levanter`` layout (``tokens``, ``loss_mask``,
        ``segment_ids``; ``loss_weight`` float32 with ``loss_weighting``): only their pieces are read."""
        if self.is_finite() and j >= len(self._batches):
            raise IndexError(
                f"batch {j} is past the pipeline's last ({len(self._batches)} batches of "
                f"num_epochs: {self.config.num_epochs}); set num_epochs: null or train fewer steps"
            )
        j, lo, hi = int(j), int(lo), int(hi)
        self._batches.locate(j)  # IndexError past the end
        with self._lock:
            walk = self._walks.pop((lo, hi), None)
            if walk is None or walk.position != j:
                if walk is not None:
                    walk.close()
                walk = self._walk(j, lo, hi)
            self._walks[(lo, hi)] = walk
            while len(self._walks) > WALKS_KEPT:
                self._walks.pop(next(iter(self._walks))).close()
            canonical = walk.next()
            self.reads.append((j, lo, hi))
        if self.vocab_size is not None:
            hint = f" (batch {j}): the data's tokenizer has a larger vocabulary than the model; give its vocab_size"
            check_token_ids(canonical["tokens"], self.vocab_size, "vocab_size", hint)
        return to_format(canonical, "levanter", **self.config.batch_options)

    def rows(self, indices: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(tokens, loss weight, segment_ids) of each element, in the order asked, each run of consecutive rows of
        a batch read once (:meth:`read`). The loss weight is ``loss_weight`` (float32) with ``loss_weighting``,
        else ``loss_mask``."""
        index = np.asarray([int(i) for i in indices], np.int64)
        if index.size and index.min() < 0:
            raise IndexError(f"element {int(index.min())} is negative")
        got: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        distinct = np.unique(index)
        batch_of = distinct // self.batch_size
        for j in np.unique(batch_of).tolist():
            row_numbers = distinct[batch_of == j] - j * self.batch_size
            for lo, hi in runs(row_numbers):
                b = self.read(j, lo, hi)
                weight = b.get("loss_weight", b["loss_mask"])
                for r in range(lo, hi):
                    got[j * self.batch_size + r] = (b["tokens"][r - lo], weight[r - lo], b["segment_ids"][r - lo])
        return [got[i] for i in index.tolist()]

    def __repr__(self) -> str:
        return f"PipelineRows(rows of {self.seq_len} tokens, batch_size={self.batch_size})"
