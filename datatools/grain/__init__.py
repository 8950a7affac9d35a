"""Grain transforms: datatools stages as ``grain.MapDataset`` / ``grain.IterDataset`` (packing, shuffles, bucketing,
chunking, batching, formats, and one host's rows of a global batch schedule). Every stage emits canonical rows or
batches (:mod:`datatools.kernels.batch_layouts`)."""

import logging as _logging

from absl import logging as _absl_logging  # noqa: F401  (creates absl's logger, which Grain logs through)


class _NoJaxProfilerWarning(_logging.Filter):
    """Drop the warning Grain logs when imported without jax (a base install would print it on every command)."""

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
