"""Attention on packed rows: dense (masked ctx x ctx) against segment-aware block-sparse, at equal useful tokens.

Rows are packed (best fit decreasing) from distribution (b) (lognormal median 400, mean ~800 tokens, up to
8192), 16,384 slots per batch at every ctx (8 x 2048, 4 x 4096, 2 x 8192). Model: d_model 128, 4 heads, 2
layers, float32, on this machine's CPU. For each ctx and implementation: the attention alone (forward +
backward of one layer's attention, q/k/v given) and the whole training step, median of 3 timed runs after a
compiling one; peak memory is XLA's temporary buffer size for the compiled program (memory_analysis); the
attention pairs computed (dense: rows x ctx^2; blocksparse: non-empty tiles x 128^2) against the useful ones
(in-document causal pairs). Target at ctx 8192: blocksparse >= 4x faster in the attention part, >= 2x for the
step, and peak memory no longer growing with ctx^2.

    python benchmarks/attention.py [--contexts 2048 4096 8192] [--slots 16384]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from _common import distribution, print_table, write_json

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from datatools import materialize, pack_lengths  # noqa: E402
from datatools.kernels.attention_blocks import attention_pairs, block_pairs  # noqa: E402
from datatools.train.attention import blocksparse_attention, dense_attention  # noqa: E402
from datatools.train.model import ModelConfig  # noqa: E402
from datatools.train.step import OptimizerConfig, Trainer  # noqa: E402

BLOCK = 128


def packed_batch(ctx: int, rows: int, seed: int = 0) -> dict:
    lengths, _ = distribution("b", 20000, seed=seed)
    plan = pack_lengths(lengths, ctx)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 4096, int(lengths.sum())).astype(np.int32)
    full = np.argsort(-np.bincount(np.repeat(np.arange(plan.num_rows), np.diff(plan.row_splits))))[:rows]
    return materialize(plan, tokens, np.concatenate(([0], np.cumsum(lengths))), rows=np.sort(full))


def timed(fn, *args, repeats: int = 3) -> float:
    jax.block_until_ready(fn(*args))  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def temp_bytes(fn, *args) -> int:
    return int(fn.lower(*args).compile().memory_analysis().temp_size_in_bytes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--slots", type=int, default=16384)
    args = parser.parse_args()
    model = ModelConfig(vocab_size=4096, d_model=128, n_layers=2, n_heads=4, attention_block=BLOCK)
    rows_out, results = [], {}
    for ctx in args.contexts:
        rows = max(1, args.slots // ctx)
        batch = packed_batch(ctx, rows)
        blocks = block_pairs(batch["segment_ids"], BLOCK)
        useful, dense_pairs = attention_pairs(batch["segment_ids"])
        sparse_pairs = int(blocks["block_valid"].sum()) * BLOCK * BLOCK
        key = jax.random.PRNGKey(0)
        q, k, v = (jax.random.normal(kk, (rows, ctx, model.n_heads, model.head_dim)) for kk in jax.random.split(key, 3))
        seg = jnp.asarray(batch["segment_ids"])
        bq, bk, bv = (jnp.asarray(blocks[n]) for n in ("block_q", "block_k", "block_valid"))

        dense_grad = jax.jit(jax.grad(lambda q, k, v: dense_attention(q, k, v, seg).sum(), argnums=(0, 1, 2)))
        sparse_grad = jax.jit(jax.grad(lambda q, k, v: blocksparse_attention(q, k, v, seg, bq, bk, bv, BLOCK).sum(),
                                       argnums=(0, 1, 2)))
        entry = {"rows": rows, "useful_pairs": useful, "dense_pairs": dense_pairs, "blocksparse_pairs": sparse_pairs}
        for name, fn in (("dense", dense_grad), ("blocksparse", sparse_grad)):
            entry[f"{name}_attention_s"] = timed(fn, q, k, v)
            entry[f"{name}_attention_temp_bytes"] = temp_bytes(fn, q, k, v)
        for name in ("dense", "blocksparse"):
            trainer = Trainer(dataclasses.replace(model, attention=name), OptimizerConfig(), 100)
            state = trainer.init_state(0)
            host = {**batch, **blocks}
            dev = trainer.put_batch(host)
            step = trainer.train_step
            entry[f"{name}_step_temp_bytes"] = temp_bytes(step, state, dev)
            state, _ = step(state, dev)  # compile
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                state, metrics = step(state, dev)
                jax.block_until_ready(metrics["loss"])
                times.append(time.perf_counter() - t0)
            entry[f"{name}_step_s"] = float(np.median(times))
        entry["attention_speedup"] = entry["dense_attention_s"] / entry["blocksparse_attention_s"]
        entry["step_speedup"] = entry["dense_step_s"] / entry["blocksparse_step_s"]
        results[str(ctx)] = entry
        rows_out.append([f"{ctx:,} ({rows} rows)", f"{entry['dense_attention_s'] * 1e3:,.0f}",
                         f"{entry['blocksparse_attention_s'] * 1e3:,.0f}", f"{entry['attention_speedup']:.1f}x",
                         f"{entry['dense_step_s']:.2f}", f"{entry['blocksparse_step_s']:.2f}",
                         f"{entry['step_speedup']:.1f}x",
                         f"{entry['dense_step_temp_bytes'] / 2**20:,.0f}", f"{entry['blocksparse_step_temp_bytes'] / 2**20:,.0f}",
                         f"{dense_pairs / useful:.1f}x", f"{sparse_pairs / useful:.2f}x"])
        print(f"ctx {ctx}: done", flush=True)
    print_table(f"Attention on packed rows, {args.slots:,} slots per batch, d_model 128, 4 heads, 2 layers, CPU "
                f"(median of 3)",
                ["ctx", "dense attn fwd+bwd ms", "blocksparse ms", "attn speed-up", "dense step s",
                 "blocksparse step s", "step speed-up", "dense step temp MiB", "blocksparse step temp MiB",
                 "dense pairs / useful", "blocksparse pairs / useful"], rows_out)
    last = results[str(max(args.contexts))]
    ok_attn, ok_step = last["attention_speedup"] >= 4, last["step_speedup"] >= 2
    print(f"{'PASS' if ok_attn else 'FAIL'}  attention >= 4x at ctx {max(args.contexts)} ({last['attention_speedup']:.1f}x)")
    print(f"{'PASS' if ok_step else 'FAIL'}  step >= 2x at ctx {max(args.contexts)} ({last['step_speedup']:.1f}x)")
    print(f"wrote {write_json('attention', {'block': BLOCK, 'slots': args.slots, 'contexts': results})}")


if __name__ == "__main__":
    main()
