"""Levanter (Marin) trained from a datatools pipeline, through Levanter's own dataset interface (no patch).

:class:`PipelineDataset` is a pipeline as Levanter's ``AsyncDataset``; :func:`data_config` the ``LmDataConfig``
that carries it::

    from datatools.integrations.levanter import data_config
    config.data = data_config("pipeline.yaml", vocab_size=32000)   # TrainLmConfig.data, or:
    train_set = data_config("pipeline.yaml", vocab_size=32000).train_set(Pos, batch_schedule, key=key)

Element ``i`` is row ``i % B`` of the pipeline's global batch ``i // B`` (``B``: its ``batch_size``, also
Levanter's ``train_batch_size``), read by number (a restart at step ``s`` reads from batch ``s`` on), each host
reading only its devices' rows (:mod:`datatools.integrations.levanter_rows`). Rows are the ``levanter`` batch
format made into ``GrugLmExample.causal`` (docs/levanter.md). With ``boundary_targets: mask`` no target crosses a
document, unlike Levanter's own packing (``next_document`` gives its behaviour back).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from datatools.base.errors import MissingPackage
from datatools.integrations.levanter_rows import INSTALL_LEVANTER, PipelineRows
from datatools.pipeline.config import ConfigLike
from datatools.pipeline.sources import OpenedDocuments

if TYPE_CHECKING:
    import jax
    from levanter.data.text.datasets import LmDataConfig

try:  # Levanter and its own dependencies: this module runs inside Levanter
    import draccus  # Levanter's configuration library
    import equinox as eqx
    import jax.numpy as jnp
    from levanter.data.dataset import AsyncDataset
    from levanter.data.text.examples import GrugLmExample
except ModuleNotFoundError as exc:  # one line naming the install, not a traceback ending in draccus
    raise MissingPackage(
        f"datatools.integrations.levanter needs Levanter ({exc.name} is not installed in {sys.executable}): "
        f"{INSTALL_LEVANTER}",
        name=exc.name,
    ) from None

__all__ = ["PipelineDataset", "data_config", "example_from_row"]


@eqx.filter_jit  # type: ignore[untyped-decorator]  # equinox is not in the type-checking venv (Levanter's)
def _causal(tokens: jax.Array, loss_weight: jax.Array, segment_ids: jax.Array) -> GrugLmExample:
    return GrugLmExample.causal(tokens=tokens, loss_weight=loss_weight, segment_ids=segment_ids)


def example_from_row(tokens: np.ndarray, loss_mask: np.ndarray, segment_ids: np.ndarray) -> GrugLmExample:
    """One row of a ``levanter``-format batch as Levanter's example (``GrugLmExample.causal``: causal and
    same-segment attention, ``loss_mask`` as the loss weight, no loss where the next token is padding)."""
    return _causal(
        jnp.asarray(tokens, jnp.int32), jnp.asarray(loss_mask, jnp.float32), jnp.asarray(segment_ids, jnp.int32)
    )


class PipelineDataset(AsyncDataset[GrugLmExample]):  # type: ignore[misc]  # Levanter is not installed where mypy runs: Any
    """A datatools pipeline's packed rows as Levanter's ``AsyncDataset`` of ``GrugLmExample``, read by
    :class:`~datatools.integrations.levanter_rows.PipelineRows` (``self.source``; its arguments and errors)."""

    def __init__(
        self, pipeline: ConfigLike, *, documents: OpenedDocuments | None = None, vocab_size: int | None = None
    ):
        super().__init__()
        self.source = PipelineRows(pipeline, documents=documents, vocab_size=vocab_size)
        self.config = self.source.config
        self.seq_len = self.source.seq_len
        self.batch_size = self.source.batch_size

    def is_finite(self) -> bool:
        return self.source.is_finite()

    async def async_len(self) -> int:
        return len(self.source)

    def batch(self, j: int) -> dict[str, np.ndarray]:
        """Global batch ``j`` in the ``levanter`` layout (``tokens``, ``loss_mask``, ``segment_ids``), all its rows."""
        return self.source.read(j, 0, self.batch_size)

    def rows(self, indices: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(tokens, loss weight, segment_ids) of each element, only the rows asked for read
        (:meth:`PipelineRows.rows <datatools.integrations.levanter_rows.PipelineRows.rows>`)."""
        return self.source.rows(indices)

    async def get_batch(self, indices: Sequence[int]) -> Sequence[GrugLmExample]:
        rows = await asyncio.to_thread(self.source.rows, list(indices))  # reads off Levanter's event loop
        return [example_from_row(*row) for row in rows]

    def __repr__(self) -> str:
        return f"PipelineDataset(rows of {self.seq_len} tokens, batch_size={self.batch_size})"


def _encoded(dataset: PipelineDataset) -> dict[str, Any]:
    """What Levanter's configuration dump (draccus YAML, logged by ``train_lm``) writes for the dataset: the
    pipeline's config (else the dump fails: draccus has no encoder for a dataset object)."""
    return {"datatools_pipeline": dataclasses.asdict(dataset.config)}


draccus.encode.register(PipelineDataset, _encoded)


def data_config(
    pipeline: ConfigLike,
    *,
    vocab_size: int | None = None,
    tokenizer: str = "passthrough",
    documents: OpenedDocuments | None = None,
    **kwargs: Any,
) -> LmDataConfig:
    """Levanter's ``LmDataConfig`` whose training data is the datatools pipeline (one ``direct`` component), with
    Levanter's shuffle off (the pipeline shuffles) and ``mixture_block_size`` the pipeline's batch size (Levanter's
    step ``s`` holds exactly the rows of datatools' batch ``s``). ``tokenizer``: what Levanter reports with
    (``passthrough`` needs ``vocab_size``); further keyword arguments go to ``LmDataConfig``. With ``vocab_size``
    (the model's vocabulary) every row read is checked against it: a token id at or above it is a ValueError naming
    the id, instead of a run that trains on ids its embedding has no row for."""
    from levanter.data.text.datasets import DirectDatasetComponent, LmDataConfig

    dataset = PipelineDataset(pipeline, documents=documents, vocab_size=vocab_size)
    kwargs.setdefault("mixture_block_size", dataset.batch_size)
    component = DirectDatasetComponent(datasets={"train": dataset})
    return LmDataConfig(
        tokenizer=tokenizer, vocab_size=vocab_size, components={"datatools": component}, shuffle=False, **kwargs
    )
