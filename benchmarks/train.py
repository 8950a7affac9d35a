"""Training throughput: pad-to-max vs bucketed vs packed batches, same data, model and useful tokens.

Documents of distribution (a) (lognormal, mean ~230 tokens, at most 1024; random
token ids), ctx 1024, the same small transformer for all three, each trained until
it has seen the same number of useful (non-padding) tokens:

* pad-to-max: one document per row, padded to 1024 (a single 1024 bucket);
* bucketed: 4 optimal tile-aligned buckets up to 1024, 4096-token batches;
* packed: planned best-fit-decreasing packing into rows of 1024.

Reported: wall time (all steps; compilation included), steady-state useful
tokens/s (steps after the first), efficiency, MFU (measured CPU peak on a CPU; the
bf16 peak table on a GPU/TPU), and the speed-up over pad-to-max. Target on a CPU:
packed >= 3x pad-to-max useful tokens/s.

    python benchmarks/train.py [--useful-tokens 120000] [--d-model 128] [--layers 2] [--repeats 3]
"""

from __future__ import annotations

import argparse

import jax
import numpy as np
from _common import announce, distribution, fmt_rate, print_table, write_json

from datatools.io.sources.documents import ArrayDocuments  # noqa: E402
from datatools.pipeline import parse_config  # noqa: E402
from datatools.train.loop import TrainConfig, TrainSection, train  # noqa: E402
from datatools.train.model import ModelConfig  # noqa: E402

VOCAB = 4096
RUNS = {
    "pad-to-max (1 doc/row, 1024)": {"bucketing": {"boundaries": [1024], "overflow": "truncate"}, "batch_size": 4},
    "bucketed (4 buckets, 4096 tokens/batch)": {
        "bucketing": {"num_buckets": 4, "tile": 128, "max_len": 1024, "token_budget": 4096}
    },
    "packed (BFD, 4x1024)": {"packing": {"ctx": 1024}, "batch_size": 4},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--useful-tokens", type=int, default=120_000)
    parser.add_argument("--docs", type=int, default=4000)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="trainings of each batching (the one with the median useful tokens/s is reported)",
    )
    args = parser.parse_args()
    announce(args.repeats, "each run trains from scratch, compilation included in its wall time")

    lengths, ctx = distribution("a", args.docs)
    rng = np.random.default_rng(0)
    docs = ArrayDocuments(
        rng.integers(0, VOCAB, int(lengths.sum())).astype(np.int32), np.concatenate(([0], np.cumsum(lengths)))
    )
    model = ModelConfig(vocab_size=VOCAB, d_model=args.d_model, n_layers=args.layers, n_heads=4)
    print(
        f"{len(docs):,} documents, mean {lengths.mean():.0f} tokens, ctx {ctx}; model {model.num_params():,} "
        f"parameters; devices {jax.devices()}"
    )
    results, rows = {}, []
    for name, spec in RUNS.items():
        pipe = parse_config(
            {
                "source": {"path": "in-memory"},
                "shuffle": {"kind": "full"},
                "num_epochs": None,
                "drop_remainder": True,
                **spec,
            }
        )
        cfg = TrainConfig(pipe, model, TrainSection(steps=100_000, warmup_steps=5, log_every=10**9))
        runs = [
            train(cfg, documents=docs, stop_after_useful_tokens=args.useful_tokens).summary.as_dict()
            for _ in range(args.repeats)
        ]
        runs.sort(key=lambda s: s["useful_tokens_per_s"])
        results[name] = runs[len(runs) // 2]  # the median run (by useful tokens/s)
    base = results["pad-to-max (1 doc/row, 1024)"]["useful_tokens_per_s"]
    for name, s in results.items():
        s["speedup_vs_pad"] = s["useful_tokens_per_s"] / base
        rows.append(
            [
                name,
                s["steps"],
                f"{s['wall_s']:.1f}",
                f"{s['total_useful_tokens']:,}",
                f"{s['efficiency']:.1%}",
                fmt_rate(s["useful_tokens_per_s"]),
                f"{s['mfu']:.2%}",
                s["compilations"],
                f"{s['speedup_vs_pad']:.2f}x",
            ]
        )
    print_table(
        f"Same model and ~{args.useful_tokens:,} useful tokens each ({results[name]['peak_source']}: "
        f"{results[name]['peak_flops'] / 1e12:.2f} TFLOP/s)",
        ["batches", "steps", "wall s", "useful tokens", "efficiency", "useful tokens/s", "MFU", "programs", "vs pad"],
        rows,
    )
    ok = results["packed (BFD, 4x1024)"]["speedup_vs_pad"] >= 3
    print(f"{'PASS' if ok else 'FAIL'}  packed >= 3x pad-to-max useful tokens/s")
    platform = jax.devices()[0].platform
    name = "train" if platform == "cpu" else f"train_{platform}"
    print(f"wrote {write_json(name, {'platform': platform, 'runs': results, 'target_packed_3x': ok})}")


if __name__ == "__main__":
    main()
