"""Levanter's block shuffle against datatools' on the same Levanter cache, inside Levanter itself.

Runs in Levanter's venv (``make test-clients-levanter`` builds it)::

    .clients/levanter/bin/python benchmarks/levanter_input.py [--cache DIR] [--paragraphs 150000] [--runs 3]

(in any other Python it says so and exits 0, so ``make bench`` passes over it).

The cache: ``--cache`` (a Levanter cache directory), or one Levanter's own builder makes from
the paragraphs of the standard-library sources (real text, mostly short documents) with a
byte-level BPE trained here. Both pipelines read it with Marin's shuffle settings
(``io_block_size`` 64, ``window_blocks`` 1024, Feistel), ``--seq-len`` tokens per row,
``--batch-size`` rows per batch, ``--batches`` batches:

* Levanter's pre-training path: ``TokenSeqDataset`` (the cache's tokens back to back cut into
  rows: no padding, documents cut at row ends, attention kept inside documents by EOS
  segment ids) under ``BlockShufflingDataset``; a batch is ``get_batch`` of its indices.
* datatools: ``source.path: CACHE`` (read in place), ``BlockShuffle`` with the same
  settings over rows packed by datatools (planned best-fit-decreasing: one plan from the
  lengths, documents longer than a row split; the block shuffle permutes packed rows).

Per batch: documents it holds pieces of; the distinct groups they come from (a group: 64
consecutive documents of the cache, what an io block of documents is); io-block reads (the
distinct ``64 x seq_len``-token ranges of the cache's token array it reads, Levanter's io
block in tokens); documents cut (pieces that are not a whole document). Then real tokens/s
(wall time of producing the batches after a first, untimed one, median of ``--runs``) and
padding. The machine, its load
(``os.getloadavg``) before and after, and the ratio to Levanter's row are printed and written
to ``benchmarks/results/levanter_input.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fmt_rate, print_table, write_json  # noqa: E402

IO_BLOCK, WINDOW_BLOCKS, GROUP = 64, 1024, 64


def paragraphs(limit: int) -> list[str]:
    out = []
    for f in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        out += [p for p in f.read_text(encoding="utf-8", errors="replace").split("\n\n") if p.strip()]
        if len(out) >= limit:
            break
    return out[:limit]


def build_cache(root: Path, limit: int) -> Path:
    """A Levanter cache made by Levanter's own builder from ``limit`` standard-library paragraphs."""
    from levanter.data.sharded_datasource import UrlDataSource
    from levanter.data.text.cache import build_lm_dataset_cache
    from levanter.data.text.formats import TextLmDatasetFormat
    from levanter.tokenizers import load_tokenizer

    from datatools.jobs.demo_data import train_tokenizer

    texts = paragraphs(limit)
    (root / "tok").mkdir(parents=True)
    train_tokenizer(texts[:5000], root / "tok" / "tokenizer.json", vocab_size=4096)
    (root / "tok" / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    with open(root / "docs.jsonl", "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    path = root / "cache" / "train"
    build_lm_dataset_cache(
        str(path), UrlDataSource([str(root / "docs.jsonl")]), TextLmDatasetFormat(), load_tokenizer(str(root / "tok"))
    )
    return path


def batch_stats(offsets: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seq_len: int) -> dict:
    """Documents, groups, io-block reads and cut documents of one batch read as token ranges
    ``[starts[k], starts[k] + lengths[k])`` of the cache's flat token array (vectorized)."""
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    first = np.searchsorted(offsets, starts, side="right") - 1
    last = np.searchsorted(offsets, starts + lengths - 1, side="right") - 1
    counts = last - first + 1
    docs = np.unique(np.repeat(last, counts) - (np.repeat(np.cumsum(counts), counts) - np.arange(counts.sum()) - 1))
    block = IO_BLOCK * seq_len
    b0, b1 = starts // block, (starts + lengths - 1) // block
    nb = b1 - b0 + 1
    blocks = np.unique(np.repeat(b1, nb) - (np.repeat(np.cumsum(nb), nb) - np.arange(nb.sum()) - 1))
    whole = (starts == offsets[first]) & (starts + lengths == offsets[first + 1]) & (first == last)
    return {
        "documents": int(docs.size),
        "groups": int(np.unique(docs // GROUP).size),
        "io_blocks": int(blocks.size),
        "cut": int((~whole).sum()),
    }


def levanter_run(cache_dir: Path, seq_len: int, batch: int, batches: int) -> tuple[float, list[dict], int, int]:
    """Levanter's TokenSeqDataset under BlockShufflingDataset: (seconds, per-batch stats, real tokens, slots)."""
    from levanter.data.dataset import AsyncDataset, BlockShufflingDataset
    from levanter.data.text.datasets import TokenSeqDataset
    from levanter.store.cache import TreeCache
    from levanter.utils.thread_utils import blocking_wait

    cache = TreeCache.load(str(cache_dir), {"input_ids": np.zeros(0, np.int64)})
    seqs = TokenSeqDataset(cache, seq_len)
    asked: list[list[int]] = []

    class Recorded(AsyncDataset):  # the rows the shuffle reads, as it asks for them
        async def async_len(self):
            return await seqs.async_len()

        def is_finite(self):
            return True

        async def get_batch(self, indices):
            asked.append(list(indices))
            return await seqs.get_batch(indices)

    ds = BlockShufflingDataset(Recorded(), IO_BLOCK, window_blocks=WINDOW_BLOCKS, key=0, perm_type="feistel")
    real = slots = 0
    for k in range(batches + 1):  # batch 0 warms up (opens the arrays, makes the permutations): not timed
        if k == 1:
            t0 = time.perf_counter()
        rows = blocking_wait(ds.get_batch(list(range(k * batch, (k + 1) * batch))))
        if k:
            real += sum(int(np.asarray(r["input_ids"]).size) for r in rows)
            slots += seq_len * len(rows)
    seconds = time.perf_counter() - t0
    offsets = _offsets(cache_dir)
    stats = [
        batch_stats(offsets, np.asarray(a, np.int64) * seq_len, np.full(len(a), seq_len, np.int64), seq_len)
        for a in asked[1:]
    ]
    return seconds, stats, real, slots


def _offsets(cache_dir: Path) -> np.ndarray:
    from datatools.io.formats.levanter_cache import LevanterCache

    return LevanterCache(cache_dir).offsets


def datatools_run(cache_dir: Path, seq_len: int, batch: int, batches: int) -> tuple[float, list, int, int]:
    """datatools on the cache: BlockShuffle with Levanter's settings over packed rows (planned packing: the plan
    is made once from the lengths, each batch's pieces are read in one call)."""
    from datatools.io.formats.levanter_cache import LevanterCache
    from datatools.io.sources.documents import DocumentSource, StoreDocuments
    from datatools.pipeline import build

    docs = StoreDocuments(LevanterCache(cache_dir))
    reads: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    class Recorded(DocumentSource):
        """A document source that notes the pieces each batch reads (one read_pieces call a batch)."""

        def __len__(self):
            return len(docs)

        def lengths(self):
            return docs.lengths()

        def read_pieces(self, doc, start, length):
            reads.append((np.asarray(doc, np.int64), np.asarray(start, np.int64), np.asarray(length, np.int64)))
            return docs.read_pieces(doc, start, length)

    packing = {"mode": "planned", "ctx": seq_len, "overflow": "split"}
    cfg = {
        "source": {"path": str(cache_dir)},
        "packing": packing,
        "batch_size": batch,
        "num_epochs": None,
        "shuffle": {"kind": "block", "io_block_size": IO_BLOCK, "window_blocks": WINDOW_BLOCKS},
        "seed": 0,
        "workers": 0,
    }
    it = iter(build(cfg, documents=Recorded()))
    real = slots = 0
    for k in range(batches + 1):  # batch 0 warms up (plans the packing, opens the arrays): not timed
        if k == 1:
            t0 = time.perf_counter()
        b = next(it)
        if k:
            real += int((b["segment_ids"] > 0).sum())
            slots += b["segment_ids"].size
    seconds = time.perf_counter() - t0
    offsets = docs.store.offsets
    stats = [batch_stats(offsets, offsets[d] + s, n, seq_len) for d, s, n in reads[1 : batches + 1]]
    return seconds, stats, real, slots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, help="a Levanter cache directory (default: build one)")
    parser.add_argument("--paragraphs", type=int, default=150_000)  # the standard library holds ~137,000
    parser.add_argument("--seq-len", type=int, default=128)  # 8.4M-token windows: this cache fills two
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    try:
        import levanter  # noqa: F401
    except ImportError:
        print(
            "skipped: needs Levanter; run it with .clients/levanter/bin/python (make test-clients-levanter builds it)"
        )
        return 0
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    load_before = os.getloadavg()
    cache_dir = args.cache or build_cache(Path(tempfile.mkdtemp(prefix="levanter-bench-")), args.paragraphs)
    offsets = _offsets(cache_dir)
    cases = [
        (
            "Levanter TokenSeqDataset + BlockShufflingDataset",
            lambda: levanter_run(cache_dir, args.seq_len, args.batch_size, args.batches),
        ),
        (
            "datatools BlockShuffle + planned BFD packing",
            lambda: datatools_run(cache_dir, args.seq_len, args.batch_size, args.batches),
        ),
    ]
    results = []
    for label, run in cases:
        timings = [run() for _ in range(args.runs)]
        seconds = float(np.median([t[0] for t in timings]))
        _, stats, real, slots = timings[-1]
        med = {k: float(np.median([s[k] for s in stats])) for k in stats[0]}
        results.append(
            {
                "pipeline": label,
                "seconds": seconds,
                "real_tokens": real,
                "slots": slots,
                "real_tokens_per_s": real / seconds,
                "padding": 1 - real / slots,
                **{f"median_{k}_per_batch": v for k, v in med.items()},
            }
        )
    load_after = os.getloadavg()
    base = results[0]["real_tokens_per_s"]
    rows = [
        [
            r["pipeline"],
            f"{r['median_documents_per_batch']:.0f}",
            f"{r['median_groups_per_batch']:.0f}",
            f"{r['median_io_blocks_per_batch']:.0f}",
            f"{r['median_cut_per_batch']:.0f}",
            fmt_rate(r["real_tokens_per_s"]),
            f"{r['real_tokens_per_s'] / base:.2f}x",
            f"{r['padding']:.2%}",
        ]
        for r in results
    ]
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    print(
        f"machine: {machine}; load average before {load_before[0]:.1f}, after {load_after[0]:.1f}; "
        f"median of {args.runs} runs"
    )
    print_table(
        f"Levanter cache {cache_dir}: {len(offsets) - 1:,} documents, {int(offsets[-1]):,} tokens; "
        f"io_block_size {IO_BLOCK}, window_blocks {WINDOW_BLOCKS}, {args.batches} batches of "
        f"{args.batch_size} x {args.seq_len}",
        [
            "pipeline",
            "documents/batch",
            "groups/batch",
            "io-block reads/batch",
            "documents cut/batch",
            "real tokens/s",
            "vs Levanter",
            "padding",
        ],
        rows,
    )
    path = write_json(
        "levanter_input",
        {
            "cache": str(cache_dir),
            "documents": len(offsets) - 1,
            "tokens": int(offsets[-1]),
            "seq_len": args.seq_len,
            "batch_size": args.batch_size,
            "batches": args.batches,
            "io_block_size": IO_BLOCK,
            "window_blocks": WINDOW_BLOCKS,
            "group": GROUP,
            "runs": args.runs,
            "load_before": load_before,
            "load_after": load_after,
            "results": results,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
