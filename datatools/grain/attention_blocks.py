"""The attention tile lists of each batch, computed in the loader (host CPU, Grain), not on the accelerator."""

from __future__ import annotations

import grain
from datatools.base.checks import check_int
from datatools.kernels.attention_blocks import block_pairs, block_structure, tile_list


class AttentionBlocks(grain.transforms.Map):
    """Add the (query, key) tiles of ``block`` tokens that hold work (:mod:`datatools.kernels.attention_blocks`) to
    a canonical batch: ``block_q``, ``block_k``, ``block_valid`` (int32, (rows, P)) per row for the JAX kernel, and
    ``tile_row``, ``tile_q``, ``tile_k``, ``tile_full``, ``tile_by_k`` (int32, (P,)) and ``tile_count`` (int32,
    (1,)) batch-wide for the Pallas kernel. ``block`` must divide the batch's row length."""

    def __init__(self, block: int):
        self.block = check_int(block, "attention_block", minimum=1)

    def map(self, element):
        kinds = block_structure(element["segment_ids"], self.block)
        return {
            **element,
            **block_pairs(element["segment_ids"], self.block, kinds=kinds),
            **tile_list(element["segment_ids"], self.block, kinds=kinds),
        }
