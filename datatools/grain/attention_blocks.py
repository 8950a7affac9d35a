"""The attention tile lists of each batch, computed in the loader (host CPU, Grain), not on the accelerator."""

from __future__ import annotations

import grain

from datatools.kernels.attention_blocks import block_pairs
from datatools.kernels.validate import check_int


class AttentionBlocks(grain.transforms.Map):
    """Add ``block_q``, ``block_k``, ``block_valid`` (int32, (rows, P)) to a canonical batch: the (query, key)
    tiles of ``block`` tokens that hold work (see :mod:`datatools.kernels.attention_blocks`), the input of a
    block-sparse attention kernel. ``segment_ids`` (splash's ``SegmentIds``) stays in the batch as it is.

    Args:
      block: tile size (tokens); must divide the batch's row length.
    """

    def __init__(self, block: int):
        self.block = check_int(block, "attention_block", minimum=1)

    def map(self, element):
        return {**element, **block_pairs(element["segment_ids"], self.block)}
