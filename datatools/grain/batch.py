"""Batching of random-access rows in one call, and the batch format as a Grain map."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

import grain
from datatools.base.checks import check_choice, check_int
from datatools.kernels.batch_layouts import BOUNDARY_TARGETS, FORMATS, POSITIONS, to_format
from datatools.kernels.loss_weights import LOSS_WEIGHTINGS


def read_batch(parent: grain.MapDataset, indices: npt.ArrayLike) -> Any:  # stack_elements' nesting
    """Parent elements at ``indices`` stacked into one batch (``parent.get_batch`` when it has one)."""
    if hasattr(parent, "get_batch"):
        return parent.get_batch(indices)
    return stack_elements([parent[int(i)] for i in np.asarray(indices).tolist()])


def stack_elements(elements: list[Any]) -> Any:  # arrays, or dicts / tuples of them, as the elements
    """Elements (arrays, or dicts / tuples of them, nested) stacked along a new first axis, leaf by leaf."""
    first = elements[0]
    if isinstance(first, dict):
        return {k: stack_elements([e[k] for e in elements]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(stack_elements(list(leaves)) for leaves in zip(*elements))
    return np.stack([np.asarray(e) for e in elements])


class BatchRowsMapDataset(grain.MapDataset):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Batches of ``batch_size`` consecutive elements, like ``MapDataset.batch``, but a parent with
    ``get_batch(indices)`` (packed rows, and the shuffles over them) builds each at once: one read and one numba
    fill. Batches do not cross epochs; ``drop_remainder`` drops each epoch's last, short batch."""

    def __init__(self, parent: grain.MapDataset, batch_size: int, *, drop_remainder: bool = False):
        super().__init__(parent)
        self._batch_size = check_int(batch_size, "batch_size", minimum=1)
        self._drop_remainder = bool(drop_remainder)
        n = len(parent)
        self._length = n // self._batch_size if drop_remainder else math.ceil(n / self._batch_size)

    def __len__(self) -> int:
        return self._length

    def __str__(self) -> str:
        return f"BatchRowsMapDataset(batch_size={self._batch_size}, drop_remainder={self._drop_remainder})"

    def __getitem__(self, index: int | slice) -> Any:  # a batch, or a slice of the dataset
        if isinstance(index, slice):
            return self.slice(index)
        epoch, j = divmod(index, self._length)
        n = len(self._parent)
        start = j * self._batch_size
        return read_batch(self._parent, np.arange(start, min(n, start + self._batch_size), dtype=np.int64) + epoch * n)


class FormatBatch(grain.transforms.Map):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Convert canonical datatools batches to another layout (:mod:`datatools.kernels.batch_layouts`).

    Args:
      name: ``datatools``, ``maxtext``, ``levanter`` or ``hf``.
      boundary_targets: ``mask`` (a document's last token predicts nothing) or ``next_document`` (as MaxText: it
        predicts the next document's first token in the row).
      positions: ``restart`` (every piece counts from 0) or ``continue`` (a continuation piece counts on).
      loss_weighting: ``none``, ``token`` or ``document``: per-token ``loss_weights`` following the final loss
        mask (:mod:`datatools.kernels.loss_weights`).
    """

    def __init__(
        self, name: str, *, boundary_targets: str = "mask", positions: str = "restart", loss_weighting: str = "none"
    ):
        self.name = check_choice(name, "format", FORMATS)
        self.boundary_targets = check_choice(boundary_targets, "boundary_targets", BOUNDARY_TARGETS)
        self.positions = check_choice(positions, "positions", POSITIONS)
        self.loss_weighting = check_choice(loss_weighting, "loss_weighting", LOSS_WEIGHTINGS)

    def map(self, element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return to_format(
            element,
            self.name,
            boundary_targets=self.boundary_targets,
            positions=self.positions,
            loss_weighting=self.loss_weighting,
        )
