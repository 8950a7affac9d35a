"""The attention tile lists of each batch, computed in the loader (host CPU, Grain), not on the accelerator."""

from __future__ import annotations

import numpy as np

import grain
from datatools.base.checks import check_int
from datatools.kernels.attention_blocks import block_pairs, block_structure, device_tile_lists, tile_list


class AttentionBlocks(grain.transforms.Map):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Add the (query, key) tiles of ``block`` tokens that hold work (:mod:`datatools.kernels.attention_blocks`) to
    a canonical batch: ``block_q``, ``block_k``, ``block_valid`` (int32, (rows, P)) per row for the JAX kernel, and
    ``tile_row``, ``tile_q``, ``tile_k``, ``tile_full``, ``tile_by_k`` (int32, (P,)) and ``tile_count`` (int32,
    (1,)) batch-wide for the Pallas kernel. ``block`` must divide the batch's row length.

    ``devices`` > 1: the batch's rows are split over that many devices in contiguous slices (how ``datatools train``
    shards the batch axis over its local devices), and the tile list is one per device instead,
    :func:`~datatools.kernels.attention_blocks.device_tile_lists`: (devices, P) arrays, ``tile_row`` within the
    device's slice, ``tile_count`` (devices, 1), what the sharded block-sparse kernel reads."""

    def __init__(self, block: int, devices: int = 1):
        self.block = check_int(block, "attention_block", minimum=1)
        self.devices = check_int(devices, "devices", minimum=1)

    def map(self, element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        seg = element["segment_ids"]
        kinds = block_structure(seg, self.block)
        tiles = (
            device_tile_lists(seg, self.block, self.devices, kinds=kinds)
            if self.devices > 1
            else tile_list(seg, self.block, kinds=kinds)
        )
        return {**element, **block_pairs(seg, self.block, kinds=kinds), **tiles}
