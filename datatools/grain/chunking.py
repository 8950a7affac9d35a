"""Tile-aligned chunking of long documents as a Grain flat-map transform."""

from __future__ import annotations

from typing import Any

import numpy as np

import grain
from datatools.base.checks import check_int
from datatools.grain.document_blocks import document_block
from datatools.kernels.tiles import chunk


class TileChunk(grain.experimental.FlatMapTransform):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Cut each document into windows of at most ``ctx`` tokens, a multiple of ``tile`` (the accelerator's tile,
    e.g. 128); ``stride``, ``bos``, ``eos`` as :func:`datatools.chunk`. Use it with
    ``grain.experimental.FlatMapIterDataset(ds, TileChunk(...))`` or :func:`chunk_documents`.

    Args:
      max_fan_out: the most windows one document may give (Grain's limit for flat maps).
      feature: the dict key of the tokens when elements are dicts.
    """

    def __init__(
        self,
        ctx: int,
        *,
        tile: int,
        stride: int | None = None,
        bos: int | None = None,
        eos: int | None = None,
        max_fan_out: int = 4096,
        feature: str = "tokens",
    ):
        chunk(np.zeros(0, np.int32), ctx, tile=tile, stride=stride)  # validate the options now
        self.ctx, self.tile, self.stride, self.bos, self.eos = ctx, tile, stride, bos, eos
        self.max_fan_out = check_int(max_fan_out, "max_fan_out", minimum=1)
        self.feature = feature

    def flat_map(self, element: Any) -> list[np.ndarray]:
        tokens, lengths = document_block(element, self.feature)
        if lengths.shape[0] != 1:
            raise ValueError("TileChunk takes one document per element, not a block")
        return chunk(tokens, self.ctx, tile=self.tile, stride=self.stride, bos=self.bos, eos=self.eos)


def chunk_documents(ds: grain.IterDataset, ctx: int, *, tile: int, **kwargs: Any) -> grain.IterDataset:
    """``ds`` with every document cut into tile-aligned windows of at most ``ctx`` tokens (see :class:`TileChunk`)."""
    return grain.experimental.FlatMapIterDataset(ds, TileChunk(ctx, tile=tile, **kwargs))
