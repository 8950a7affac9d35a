"""Grain transforms: everything in datatools as ``grain.MapDataset`` / ``grain.IterDataset`` stages.

* :class:`PackedRowsMapDataset`: planned packing of a random-access source (random
  access to packed rows: global shuffle, sharding, checkpoints for free);
* :class:`DocumentsMapDataset`: documents of a source, readable a block at a time;
* :class:`StreamingPackIterDataset`: packing within a window of a document stream;
* :class:`FeistelShuffleMapDataset`, :class:`BlockShuffleMapDataset`: epoch-aware
  random-access shuffles;
* :class:`BucketBatchIterDataset`: fixed-shape padded batches per length bucket;
* :class:`TileChunk` / :func:`chunk_documents`: tile-aligned chunking;
* :class:`BatchRowsMapDataset`: whole batches of packed rows in one call;
* :class:`FormatBatch`: canonical batches to ``maxtext``, ``levanter`` or ``hf``;
* :class:`HostBatchesMapDataset`: one host's rows of a global batch sequence
  (:class:`PlannedSchedule`, :class:`StreamingSchedule`, :class:`BucketSchedule`, computed
  from document lengths alone): what the pipeline builds, for any number of hosts, with
  checkpoints that restore on any number of hosts.

Every stage emits the canonical datatools row or batch (``tokens``, ``segment_ids``,
``positions``, ``loss_mask``; see :mod:`datatools.kernels.batch_layouts`).
"""

import logging as _logging

from absl import logging as _absl_logging  # noqa: F401  (creates absl's logger, which Grain logs through)


class _NoJaxProfilerWarning(_logging.Filter):
    """Grain tries ``from jax import profiler`` when imported and logs a warning when jax is absent; a base
    install (no jax extra) would print it on every command. Only that one message is dropped."""

    def filter(self, record: _logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to load jax profiler")


_logging.getLogger("absl").addFilter(_NoJaxProfilerWarning())

from datatools.grain.attention_blocks import AttentionBlocks
from datatools.grain.batch import BatchRowsMapDataset, FormatBatch
from datatools.grain.bucket_schedule import BucketSchedule
from datatools.grain.bucketing import BucketBatchIterDataset
from datatools.grain.chunking import TileChunk, chunk_documents
from datatools.grain.document_dataset import DocumentsMapDataset
from datatools.grain.host_batches import DocumentOrder, HostBatchesMapDataset, PlannedSchedule
from datatools.grain.packed_rows import PackedRowsMapDataset
from datatools.grain.shuffle import BlockShuffleMapDataset, FeistelShuffleMapDataset
from datatools.grain.streaming_pack import StreamingPackIterDataset
from datatools.grain.streaming_schedule import StreamingSchedule

__all__ = [
    "AttentionBlocks",
    "BatchRowsMapDataset",
    "BlockShuffleMapDataset",
    "BucketBatchIterDataset",
    "BucketSchedule",
    "DocumentOrder",
    "DocumentsMapDataset",
    "FeistelShuffleMapDataset",
    "FormatBatch",
    "HostBatchesMapDataset",
    "PackedRowsMapDataset",
    "PlannedSchedule",
    "StreamingPackIterDataset",
    "StreamingSchedule",
    "TileChunk",
    "chunk_documents",
]
