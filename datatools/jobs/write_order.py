"""The order a pre-tokenize job writes documents in: the input's, or a seeded random order of the whole input (every
file and shard together), recorded in the store's manifest as ``write_order``.

A shuffled write is the job's commit step, so tokenizing, resuming and both engines stay as they are: the staged
shards (tokenized in input order, each complete or absent) are copied once, in input order, into one flat spill
file of tokens; then the store is written from that file in the order of a keyed Feistel permutation of the stored
documents, a bounded block of tokens at a time (store position ``j`` holds input document ``perm(j)``). The
permutation depends on the seed and the number of documents alone, so a rerun, a resume after a kill, any number of
workers and either engine write the same bytes. Cost over an input-order commit: one more write and one more
(random, page-cached) read of the tokens; memory: 24 bytes per document plus one block.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from datatools.io.formats.store import describe_write_order, write_order_record, write_seed
from datatools.io.sources.documents import gather_at

__all__ = ["describe_write_order", "shuffled_shards", "write_order_record", "write_seed", "written_order"]
from datatools.jobs.staging import fault
from datatools.kernels.shuffle import FeistelPermutation

BLOCK_TOKENS = 1 << 22  # tokens gathered per block handed to the store writer (8-16 MiB)
SPILL_NAME = "order.bin"  # the flat spill file in a local job's staging directory


def written_order(num_documents: int, seed: int) -> np.ndarray:
    """int64 input index of the document at each store position of a store written with ``seed``."""
    if num_documents == 0:
        return np.zeros(0, np.int64)
    order: np.ndarray = FeistelPermutation(num_documents, seed)(np.arange(num_documents, dtype=np.int64))
    return order


def shuffled_shards(
    shard_tokens: Callable[[int], np.ndarray],
    lengths_per_shard: list[np.ndarray],
    seed: int,
    spill: str | os.PathLike[str],
    dtype: np.dtype,
    block_tokens: int = BLOCK_TOKENS,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(tokens, lengths) blocks of every document of the staged shards in the order :func:`written_order` gives,
    for :func:`~datatools.io.formats.store.write_store`.

    Args:
      shard_tokens: ``shard_tokens(k)``: the tokens of staged shard k (read once each, in order).
      lengths_per_shard: the lengths (tokens) of each staged shard's documents.
      spill: a local file path for the flat spill (overwritten; the caller removes it).
      block_tokens: tokens per block yielded (a document longer than this is a block of its own).
    """
    dtype = np.dtype(dtype)
    lengths = np.concatenate(lengths_per_shard) if lengths_per_shard else np.zeros(0, np.int64)
    n = int(lengths.shape[0])
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    total = int(starts[-1])
    with open(spill, "wb") as f:  # the tokens of every shard, in input order
        for k in range(len(lengths_per_shard)):
            np.ascontiguousarray(shard_tokens(k), dtype=dtype).tofile(f)
    if n == 0:
        return
    if Path(spill).stat().st_size != total * dtype.itemsize:
        raise ValueError(f"staged shards hold {Path(spill).stat().st_size} bytes of tokens, expected {total}")
    flat = np.asarray(np.memmap(spill, dtype=dtype, mode="r")) if total else np.zeros(0, dtype)
    order = written_order(n, seed)
    moved = lengths[order]
    ends = np.cumsum(moved)
    a = block = 0
    while a < n:
        before = int(ends[a - 1]) if a else 0
        b = max(a + 1, int(np.searchsorted(ends, before + block_tokens, side="right")))
        docs, lens = order[a:b], moved[a:b]
        dst = np.zeros(b - a, np.int64)
        np.cumsum(lens[:-1], out=dst[1:])
        out = np.empty(int(ends[b - 1]) - before, dtype)
        gather_at(flat, starts[docs], lens, dst, out)
        yield out, lens
        fault(f"committing-{block}")  # crash tests: killed with a block handed to the writer
        a, block = b, block + 1
