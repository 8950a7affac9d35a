"""Levanter (Marin) trained from a datatools pipeline, through Levanter's own dataset interface.

Levanter's trainer reads any ``AsyncDataset`` (``Trainer.data_loader``), and its LM data
config takes one as it is: ``DirectDatasetComponent(datasets={"train": dataset})``. So no
patch: :class:`PipelineDataset` is a datatools pipeline as that dataset, and
:func:`data_config` the ``LmDataConfig`` that carries it::

    from datatools.integrations.levanter import data_config
    config.data = data_config("pipeline.yaml", vocab_size=32000)   # TrainLmConfig.data, or:
    train_set = data_config("pipeline.yaml", vocab_size=32000).train_set(Pos, batch_schedule, key=key)

Element ``i`` is row ``i % B`` of the pipeline's global batch ``i // B`` (``B`` its
``batch_size``; give Levanter's ``train_batch_size`` the same value and step ``s`` trains
on the rows of datatools' batch ``s``). Batches are read by number (random access), so Levanter's
restart from a checkpoint at step ``s`` reads from batch ``s`` on: the same batches an
uninterrupted run reads. Levanter's ``train_lm`` logs its configuration first (``dataclasses.asdict``
deep-copies the dataset; its YAML dump writes the pipeline's config): :class:`PipelineDataset` deep-copies
and pickles (:mod:`datatools.integrations.levanter_rows`).

Several hosts: Levanter's loader (``DataLoader``) gives each process the slots of the global batch its devices
hold on the batch's data axis (``batch`` mapped to the mesh's ``data`` / ``replica`` axes): with ``P`` processes
of equal devices, process ``p`` holds slots ``[p * B / P, (p + 1) * B / P)`` of each step. Levanter's mixture then
maps those slots to a permutation of the rows of datatools' batch ``s`` (one block per batch, see
:func:`data_config`), and :class:`PipelineDataset` reads exactly the rows it is asked for, each run of
consecutive rows with the schedule's ``read(epoch, j, lo, hi)``: a host reads a ``1 / P`` share of every batch
and the hosts together read the batch once. ``shard`` in the config is ignored (Levanter decides the shares).

Each row becomes a ``GrugLmExample`` made by Levanter's own ``GrugLmExample.causal``
from the ``levanter`` batch format (:mod:`datatools.kernels.batch_layouts`):

* ``segment_ids``: datatools numbers the documents of a row 1, 2, ... with 0 at padding;
  Levanter (its ``SequencePacker``) 0, 1, ... with -1 at padding. The format renumbers,
  and Levanter's attention mask (``with_segment_ids``) is causal and within a segment.
* ``loss_weight`` is datatools' ``loss_mask``: 0 at each document's last token (and at
  padding). Levanter's own packed path (``PackedTokenDataset``) keeps weight 1 there,
  training the last token of a document to predict the first token of the next one (as
  MaxText's ``ShiftData``); with datatools' default ``boundary_targets: mask`` no target
  crosses a document, so a packed row's loss is the sum of its documents' own losses.
  ``boundary_targets: next_document`` gives Levanter's behaviour back.
  With ``loss_weighting: token`` or ``document`` the weight is datatools' ``loss_weights``
  (float32): Levanter's weighted mean divides by the weight sum of each (micro-)batch, so
  ``document`` weighting holds per step; with its micro-batching (``per_device_parallelism``
  below the batch) it averages per-micro-batch means (docs/loss-weighting.md).
* positions: Levanter's models take none (rotary positions are the row offsets), so the
  ``positions`` option does not reach Levanter; with rotary embeddings attention within
  a segment is the same either way.
* tokens are int32 (Levanter's caches hold int64; JAX without x64 makes them int32 too).

Levanter's shuffle is switched off in :func:`data_config` (``shuffle=False``): the
pipeline already shuffles (full or block, seeded) before it packs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import draccus  # noqa: E402  (Levanter's configuration library)
import equinox as eqx  # noqa: E402  (Levanter's own dependencies: this module runs inside Levanter)
import jax.numpy as jnp  # noqa: E402
import numpy as np
from levanter.data.dataset import AsyncDataset  # noqa: E402
from levanter.data.text.examples import GrugLmExample  # noqa: E402

from datatools.integrations.levanter_rows import PipelineRows

__all__ = ["PipelineDataset", "data_config", "example_from_row"]


@eqx.filter_jit
def _causal(tokens, loss_weight, segment_ids) -> GrugLmExample:
    return GrugLmExample.causal(tokens=tokens, loss_weight=loss_weight, segment_ids=segment_ids)


def example_from_row(tokens: np.ndarray, loss_mask: np.ndarray, segment_ids: np.ndarray) -> GrugLmExample:
    """One row of a ``levanter``-format batch as Levanter's example (``GrugLmExample.causal``: causal and
    same-segment attention, ``loss_mask`` as the loss weight, no loss where the next token is padding)."""
    return _causal(
        jnp.asarray(tokens, jnp.int32), jnp.asarray(loss_mask, jnp.float32), jnp.asarray(segment_ids, jnp.int32)
    )


class PipelineDataset(AsyncDataset[GrugLmExample]):
    """A datatools pipeline's packed rows as Levanter's ``AsyncDataset`` of ``GrugLmExample``.

    Args:
      pipeline: a :class:`~datatools.pipeline.PipelineConfig`, a mapping or a YAML path (packing or
        bucketing, any source, shuffle, seed; ``num_epochs: null`` repeats forever). Its ``format`` must be
        ``datatools`` or ``levanter``; every host reads the rows Levanter asks it for (``shard`` is ignored).
      documents: an already opened document source to use instead of ``source.path``.

    The reading is :class:`~datatools.integrations.levanter_rows.PipelineRows` (``self.source``): each call reads
    only the rows asked for. A deep copy or an unpickled copy reads through a fresh lock (no lock is copied).

    Raises:
      ValueError: a config another trainer's format, or one without rows of one length (bucketing
        with several lengths: Levanter's batches have one ``Pos``).
    """

    def __init__(self, pipeline, *, documents=None):
        super().__init__()
        self.source = PipelineRows(pipeline, documents=documents)
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


def _encoded(dataset: PipelineDataset) -> dict:
    """What Levanter's configuration dump (draccus YAML, logged by ``train_lm``) writes for the dataset: the
    pipeline's config (else the dump fails: draccus has no encoder for a dataset object)."""
    return {"datatools_pipeline": dataclasses.asdict(dataset.config)}


draccus.encode.register(PipelineDataset, _encoded)


def data_config(pipeline, *, vocab_size: int | None = None, tokenizer: str = "passthrough", documents=None, **kwargs):
    """Levanter's ``LmDataConfig`` whose training data is the datatools pipeline (one ``direct`` component).

    Levanter's shuffle is off (the pipeline shuffles), and its ``mixture_block_size`` is the pipeline's batch
    size: Levanter's mixture permutes the slots of each block even for one source, so with blocks of one batch
    its step ``s`` holds exactly the rows of datatools' batch ``s`` (in another order). ``tokenizer`` is what
    Levanter reports and evaluates with (``passthrough`` needs ``vocab_size``); further keyword arguments go to
    ``LmDataConfig``."""
    from levanter.data.text.datasets import DirectDatasetComponent, LmDataConfig

    dataset = PipelineDataset(pipeline, documents=documents)
    kwargs.setdefault("mixture_block_size", dataset.batch_size)
    component = DirectDatasetComponent(datasets={"train": dataset})
    return LmDataConfig(
        tokenizer=tokenizer, vocab_size=vocab_size, components={"datatools": component}, shuffle=False, **kwargs
    )
