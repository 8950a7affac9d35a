"""Pre-tokenize job overhead: the whole job against the tokenizer's own encode_batch.

Texts: the Python standard library's sources (every .py file, one document each),
written as JSON Lines shards. Tokenizer: a byte-level BPE (vocab 8192) trained
here on those texts. Measured: the tokenizer's `encode_batch` over all texts
(the floor: no reading, no writing), and `datatools pretokenize` end to end
(reading JSONL, encoding, shard files, committing the tensorstore store) with 1
and 2 local workers. Target: the job's overhead over encode_batch at most 15%.

    python benchmarks/pretokenize.py [--shards 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
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
    args = parser.parse_args()
    announce(args.repeat)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = Path(sysconfig.get_paths()["stdlib"])
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.rglob("*.py"))]
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


if __name__ == "__main__":
    main()
