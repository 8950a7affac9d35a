"""Pre-tokenize job overhead: the whole job against the tokenizer's own encode_batch.

Texts: the Python standard library's sources (every .py file, one document each),
written as JSON Lines shards. Tokenizer: a byte-level BPE (vocab 8192) trained
here on those texts. Measured: the tokenizer's `encode_batch` over all texts
(the floor: no reading, no writing), and `datatools pretokenize` end to end
(reading JSONL, encoding, shard files, committing the tensorstore store) with 1
and 2 local workers. Target: the job's overhead over encode_batch at most 15%.

With --write-order: the write-time shuffle's cost instead, ``pretokenize --shuffle-seed`` against an input-order
``pretokenize`` of the same input (local pool with 1 and 2 workers; Ray too with --ray): wall time, bytes the job
process read and wrote (its rchar / wchar: with 1 local worker every byte of the job is this process's) and its
peak resident memory, each run in a fresh process. Target: at most 1.3x the input-order wall time.

    python benchmarks/pretokenize.py [--shards 16] [--repeat 3] [--write-order [--ray] [--docs N]]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import announce, fmt_rate, print_table, write_json

from datatools.jobs.pretokenize import pretokenize  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--repeats", "--repeat", dest="repeat", type=int, default=3)
    parser.add_argument("--write-order", action="store_true", help="measure --shuffle-seed against the input order")
    parser.add_argument("--ray", action="store_true", help="--write-order: Ray Data rows too")
    parser.add_argument("--docs", type=int, default=None, help="only the first N texts")
    args = parser.parse_args()
    announce(args.repeat)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = Path(sysconfig.get_paths()["stdlib"])
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.rglob("*.py"))][: args.docs]
    work = Path(tempfile.mkdtemp(prefix="dt-pretok-"))
    try:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(
            texts[:400],
            trainers.BpeTrainer(
                vocab_size=8192,
                special_tokens=["<s>", "</s>"],
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                show_progress=False,
            ),
        )
        tok_file = work / "tokenizer.json"
        tok.save(str(tok_file))
        data = work / "in"
        data.mkdir()
        per = -(-len(texts) // args.shards)
        for s in range(args.shards):
            with open(data / f"part-{s:03d}.jsonl", "w") as f:
                f.writelines(json.dumps({"text": t}) + "\n" for t in texts[s * per : (s + 1) * per])

        if args.write_order:
            write_order_costs(data, tok_file, work, args)
            return
        base_times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            enc = tok.encode_batch(texts, add_special_tokens=False)
            base_times.append(time.perf_counter() - t0)
        tokens = sum(len(e.ids) for e in enc)
        rows = [dict(what="tokenizers encode_batch (floor)", seconds=float(np.median(base_times)))]
        for workers in (1, 2):
            times = []
            for r in range(args.repeat):
                out = work / f"store-{workers}-{r}"
                t0 = time.perf_counter()
                result = pretokenize(data, out, tok_file, workers=workers, progress=False)
                times.append(time.perf_counter() - t0)
                assert result.tokens == tokens
                shutil.rmtree(out)
            rows.append(
                dict(
                    what=f"datatools pretokenize, {workers} worker{'s' * (workers > 1)}",
                    seconds=float(np.median(times)),
                    workers=workers,
                )
            )
        base = rows[0]["seconds"]
        for r in rows:
            r.update(
                docs_per_s=len(texts) / r["seconds"],
                tokens_per_s=tokens / r["seconds"],
                overhead=r["seconds"] / base - 1,
            )
        print_table(
            f"{len(texts):,} documents, {tokens:,} tokens, {args.shards} shards (median of {args.repeat})",
            ["", "seconds", "docs/s", "tokens/s", "overhead vs encode_batch"],
            [
                [
                    r["what"],
                    r["seconds"],
                    fmt_rate(r["docs_per_s"]),
                    fmt_rate(r["tokens_per_s"]),
                    f"{r['overhead']:+.1%}",
                ]
                for r in rows
            ],
        )
        ok = rows[1]["overhead"] <= 0.15
        print(f"  [{'PASS' if ok else 'FAIL'}] job overhead (1 worker) <= 15% of encode_batch")
        summary = {"documents": len(texts), "tokens": tokens, "rows": rows, "target_met": ok}
        print(f"wrote {write_json('pretokenize', summary)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


_ONE_RUN = """
import json, resource, sys, time
from datatools.jobs.pretokenize import pretokenize
def io():
    fields = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
    return int(fields["rchar"]), int(fields["wchar"])
data, out, tok, workers, engine, seed = sys.argv[1:]
r0, w0 = io()
t0 = time.perf_counter()
result = pretokenize(data, out, tok, workers=int(workers), engine=engine, progress=False,
                     shuffle_seed=None if seed == "none" else int(seed))
wall = time.perf_counter() - t0
r1, w1 = io()
print(json.dumps({"seconds": wall, "read": r1 - r0, "written": w1 - w0, "tokens": result.tokens,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def write_order_costs(data: Path, tok_file: Path, work: Path, args) -> None:
    """The --write-order table: input order against --shuffle-seed, per engine and workers (module docstring)."""
    setups = [("local", 1), ("local", 2)] + ([("ray", 2)] if args.ray else [])
    rows = []
    for engine, workers in setups:
        for order in ("input order", "shuffled (seed 7)"):
            runs = []
            for r in range(args.repeat):
                out = work / f"store-{engine}-{workers}-{r}"
                seed = "none" if order == "input order" else "7"
                cmd = [sys.executable, "-c", _ONE_RUN, str(data), str(out), str(tok_file), str(workers), engine, seed]
                done = subprocess.run(cmd, capture_output=True, text=True, check=True)
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
                shutil.rmtree(out)
            rows.append(
                dict(
                    engine=engine,
                    workers=workers,
                    order=order,
                    seconds=float(np.median([x["seconds"] for x in runs])),
                    read=int(np.median([x["read"] for x in runs])),
                    written=int(np.median([x["written"] for x in runs])),
                    peak_rss=int(np.median([x["peak_rss"] for x in runs])),
                    tokens=runs[0]["tokens"],
                )
            )
            if order != "input order":
                rows[-1]["wall_ratio"] = rows[-1]["seconds"] / rows[-2]["seconds"]
    mib = 1 << 20
    print_table(
        f"write-time shuffle: {rows[0]['tokens']:,} tokens (median of {args.repeat}; bytes and memory: the job "
        f"process, its pool workers' own not counted)",
        ["engine", "workers", "write order", "seconds", "x input order", "read MiB", "written MiB", "peak RSS MiB"],
        [
            [
                r["engine"],
                r["workers"],
                r["order"],
                r["seconds"],
                f"{r.get('wall_ratio', 1.0):.2f}x",
                f"{r['read'] / mib:,.1f}",
                f"{r['written'] / mib:,.1f}",
                f"{r['peak_rss'] / mib:,.0f}",
            ]
            for r in rows
        ],
    )
    ratios = [r["wall_ratio"] for r in rows if "wall_ratio" in r]
    ok = max(ratios) <= 1.3
    worst = max(ratios)
    print(f"  [{'PASS' if ok else 'FAIL'}] shuffled write at most 1.3x the input-order wall time (worst {worst:.2f}x)")
    print(f"wrote {write_json('pretokenize_write_order', {'rows': rows, 'target_met': ok})}")


if __name__ == "__main__":
    main()
