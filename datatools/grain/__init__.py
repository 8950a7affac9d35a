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
* :class:`FormatBatch`: canonical batches to ``maxtext``, ``levanter`` or ``hf``.

Every stage emits the canonical datatools row or batch (``tokens``, ``segment_ids``,
``positions``, ``loss_mask``; see :mod:`datatools.kernels.batch_layouts`).
"""

from datatools.grain.attention_blocks import AttentionBlocks
from datatools.grain.batch import BatchRowsMapDataset, FormatBatch
from datatools.grain.bucketing import BucketBatchIterDataset
from datatools.grain.chunking import TileChunk, chunk_documents
from datatools.grain.documents import DocumentsMapDataset
from datatools.grain.packed_rows import PackedRowsMapDataset
from datatools.grain.shuffle import BlockShuffleMapDataset, FeistelShuffleMapDataset, ShardMapDataset
from datatools.grain.streaming_pack import StreamingPackIterDataset

__all__ = [
    "AttentionBlocks",
    "BatchRowsMapDataset",
    "BlockShuffleMapDataset",
    "BucketBatchIterDataset",
    "DocumentsMapDataset",
    "FeistelShuffleMapDataset",
    "FormatBatch",
    "PackedRowsMapDataset",
    "ShardMapDataset",
    "StreamingPackIterDataset",
    "TileChunk",
    "chunk_documents",
]
