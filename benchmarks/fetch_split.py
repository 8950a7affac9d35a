"""What a host of the remote_read benchmark fetches, by cause, from the schedule alone (no bucket, no reader).

The store of ``remote_read.py`` (500M tokens, the same lengths), its block shuffle with streaming packing in lanes,
host 0 of ``hosts``: the extents (``granule`` tokens each) that the pieces and the lanes' whole windows of batches
``0 .. B + 7`` touch (the reader's read-ahead of 8 batches), each counted once, over the tokens batches ``0 .. B - 1``
deliver, split by what the rest of the fetched tokens are: documents of other hosts' io blocks sharing a granule
(epoch 0 / epoch 1), extents first read for the epoch's tail batches and not delivered (the lanes' leftover rows,
dealt column by column: a host's positions take about its own lanes' leftovers, those of a lane or two at its share's
edges excepted), this host's documents not yet delivered (windows read whole: epoch 0, and the first windows of
epoch 1 begun).

Usage::

    python benchmarks/fetch_split.py HOSTS [GRANULE_TOKENS [IO_BLOCK_SIZE]]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import remote_read as rr  # noqa: E402
from _common import lognormal_lengths  # noqa: E402

from datatools.grain.lane_schedule import LaneLayout, LaneSchedule  # noqa: E402
from datatools.io.sources.documents import extent_starts_after  # noqa: E402
from datatools.pipeline.config import parse_config  # noqa: E402


class _Lengths:
    """The store's lengths, and its documents' extents of ``granule`` tokens (what the schedule asks of a store)."""

    def __init__(self, lengths: np.ndarray, granule: int):
        self._lengths, self.granule = lengths, granule
        self._offsets = np.concatenate(([0], np.cumsum(lengths)))

    def lengths(self) -> np.ndarray:
        return self._lengths

    def next_extent_starts(self, doc: np.ndarray) -> np.ndarray:
        return extent_starts_after(self._offsets, self.granule, doc)


def main() -> None:
    hosts = int(sys.argv[1])
    granule = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
    io_block = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    tokens = 500_000_000
    lengths = lognormal_lengths(int(tokens / 700), median=400, mean=800, low=1, high=8192, seed=0)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    off = np.concatenate(([0], np.cumsum(lengths)))
    cfg = parse_config(rr.config("s3://x/y", "block, streaming (lanes)", hosts))
    p = cfg.packing
    sch = LaneSchedule(
        _Lengths(lengths, granule),
        p.options(),
        LaneLayout(io_block, p.lane_period),
        window=p.window,
        batch_size=cfg.batch_size,
        drop_remainder=True,
        seed=0,
    )
    share = cfg.batch_size // hosts
    mine = np.zeros(len(lengths), bool)
    for ep in (0, 1):
        blocks = np.concatenate([sch._epoch(ep).lane_blocks[lane] for lane in range(share * sch.period)])
        docs = (blocks[:, None] * io_block + np.arange(io_block)[None, :]).ravel()
        mine[docs[docs < len(lengths)]] = True
    out = {"hosts": hosts, "granule": granule, "io_block": io_block, "regular": sch.regular_batches(0)}
    for batches in (30, 500):
        out[str(batches)] = split(sch, off, granule, share, mine, batches)
    print(json.dumps(out))


def split(sch, off: np.ndarray, g: int, share: int, mine: np.ndarray, batches: int, ahead: int = 8) -> dict:
    lengths = np.diff(off)
    n_ext = -(-int(off[-1]) // g)
    first = np.full(n_ext, -1)  # 0: first read for epoch 0's regular batches, 1: its tail, 2: epoch 1
    deliv = np.zeros((2, len(lengths)), np.int64)
    e0, regular = sch.num_batches(0), sch.regular_batches(0)
    for k in range(batches + ahead):
        epoch, j = (0, k) if k < e0 else (1, k - e0)
        for d, s, n in (sch.pieces(epoch, j, 0, share), sch.ahead_pieces(epoch, j, 0, share)):
            keep = n > 0
            b, n = off[d[keep]] + s[keep], n[keep]
            lo, c = b // g, (b + n - 1) // g - b // g + 1
            x = np.unique(np.repeat(lo, c) + np.arange(c.sum()) - np.repeat(np.cumsum(c) - c, c))
            first[x[first[x] < 0]] = 2 if epoch else int(j >= regular)
        if k < batches:
            d, _, n = sch.pieces(epoch, j, 0, share)
            np.add.at(deliv[epoch], d, n)
    fetched = first >= 0
    cum = np.concatenate(([0], np.cumsum(fetched)))

    def upto(t: np.ndarray) -> np.ndarray:  # fetched tokens before token t
        return g * cum[t // g] + np.where(fetched[np.minimum(t // g, n_ext - 1)], t % g, 0)

    overlap = upto(off[1:]) - upto(off[:-1])
    rest = overlap - deliv.max(axis=0)
    phase = first[off[:-1] // g]
    total = int(deliv.sum())
    parts = {
        "fetched_per_delivered": int(fetched.sum()) * g / total,
        "other_hosts_documents_at_granule_edges": rest[~mine & (phase == 0)].sum() / total,
        "tail_batches_rows_of_other_hosts_lanes": rest[phase == 1].sum() / total,
        "other_hosts_documents_epoch_1": rest[~mine & (phase == 2)].sum() / total,
        "own_documents_not_delivered_epoch_0": rest[mine & (phase == 0)].sum() / total,
        "own_windows_begun_epoch_1": rest[mine & (phase == 2)].sum() / total,
        "delivered_twice_from_one_read": -deliv.min(axis=0).sum() / total,
    }
    return {k: round(float(v), 3) for k, v in parts.items()}


if __name__ == "__main__":
    main()
