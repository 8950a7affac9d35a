"""Attention on packed rows, like for like: blocksparse against causal flash and dense, on a plan's own batches.

For each length distribution and ctx, documents are packed (best fit decreasing) and the plan's rows, in a seeded
random order, are cut into batches of ``slots // ctx`` rows (the same slots per batch at every ctx). Either every
batch is timed (``--rows all``) or a seeded random sample of whole batches (``--rows random``, the default); the
output and the JSON say which (``row_selection``). No batch is chosen for its documents.

Three implementations of the same function (segment-aware causal attention), forward + backward of one layer's
attention (q, k, v given), in the same run, on this machine's CPU:

* ``dense``: the masked (ctx x ctx) score matrix;
* ``causal flash``: the running-softmax kernel of ``datatools.train.attention.blocksparse_attention`` fed every
  tile on and under the diagonal: what splash / cuDNN / flash attention compute without segment information;
* ``blocksparse``: the same kernel fed the batch's in-document tile list (``tile_list``: (row, q block, k block)
  triples for the whole batch, padded to a bucket length).

Per ctx: the non-empty tiles and the causal tiles of the timed batches, their ratio ``ideal_ratio`` (what skipping
cross-document tiles can gain at most), ``blocksparse_vs_causal`` (causal flash time / blocksparse time),
``blocksparse_vs_dense`` (dense time / blocksparse time), and each program's memory (XLA memory_analysis temporary
bytes of the compiled forward + backward; the largest over the timed batches). Times: the sum over the timed
batches of each batch's median of ``--repeats`` runs of the compiled program after an untimed one. Dense is not
run where its program would need more than ``--dense-max-gib`` of temporary memory (its memory is still reported,
from the compile).
The Pallas kernels run in interpret mode only on a CPU and are not timed here.

Target at ctx 8192 on distribution (b): blocksparse_vs_causal >= 0.7 x ideal_ratio; blocksparse memory never
above causal flash's at any ctx.

    python benchmarks/attention.py [--contexts 2048 4096 8192 16384] [--slots 16384] [--block 128]
                                   [--rows random|all] [--batches 1] [--distributions b heavy]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np
from _common import DISTRIBUTIONS, distribution, print_table, write_json

from datatools import materialize, pack_lengths  # noqa: E402
from datatools.kernels.attention_blocks import tile_list  # noqa: E402
from datatools.train.attention import SPARSE_KEYS, blocksparse_attention, dense_attention  # noqa: E402

HEAVY = dict(
    alpha=1.2,
    scale=120,
    high=65536,
    label="heavy-tailed: Pareto alpha 1.2 from 120 tokens (median ~215, p99 ~5k), <= 65,536",
)


def lengths_of(name: str, n: int, seed: int) -> np.ndarray:
    """Document lengths (tokens) of distribution ``name``: one of _common's, or ``heavy`` (Pareto)."""
    if name == "heavy":
        rng = np.random.default_rng(seed)
        return ((rng.pareto(HEAVY["alpha"], n) + 1) * HEAVY["scale"]).round().clip(1, HEAVY["high"]).astype(np.int64)
    return distribution(name, n, seed=seed)[0]


def plan_batches(lengths: np.ndarray, ctx: int, rows_per_batch: int, selection: str, count: int, seed: int):
    """The plan's rows in a seeded random order, cut into whole batches; all of them or a seeded sample of
    ``count``. Yields (batch index, total batches, segment_ids)."""
    plan = pack_lengths(lengths, ctx)
    order = np.random.default_rng(seed).permutation(plan.num_rows)
    total = plan.num_rows // rows_per_batch
    if total == 0:
        raise SystemExit(
            f"ctx {ctx}: the plan has {plan.num_rows} rows, fewer than one batch of {rows_per_batch}: raise --docs"
        )
    chosen = (
        np.arange(total)
        if selection == "all"
        else np.sort(np.random.default_rng(seed + 1).choice(total, min(count, total), replace=False))
    )
    tokens = np.zeros(int(lengths.sum()), np.int32)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    for j in chosen:
        rows = order[j * rows_per_batch : (j + 1) * rows_per_batch]
        yield int(j), total, materialize(plan, tokens, offsets, rows=rows, check_values=False)["segment_ids"]


def compiled(fn, *args):
    """``fn`` compiled for ``args`` (XLA's executable: its memory analysis, and runs without another compile)."""
    return fn.lower(*args).compile()


def timed(program, *args, repeats: int) -> float:
    """Median wall time (s) of ``repeats`` runs of a compiled program, after one untimed run (its first run
    allocates and faults in its buffers)."""
    jax.block_until_ready(program(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(program(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def temp_bytes(program) -> int:
    return int(program.memory_analysis().temp_size_in_bytes)


def device_tiles(tiles: dict) -> dict:
    return {key: jnp.asarray(tiles[key]) for key in SPARSE_KEYS}


def count_tiles(seg: np.ndarray, block: int) -> tuple[int, int]:
    """(non-empty tiles, causal tiles) of a batch at tile size ``block``."""
    rows, ctx = seg.shape
    nb = ctx // block
    return int(tile_list(seg, block)["tile_count"][0]), rows * nb * (nb + 1) // 2


def run_ctx(name: str, ctx: int, args) -> dict:
    rows_per_batch = max(1, args.slots // ctx)
    heads, dim = args.heads, args.head_dim
    grad = {
        "dense": jax.jit(jax.grad(lambda q, k, v, seg: dense_attention(q, k, v, seg).sum(), argnums=(0, 1, 2))),
        "sparse": jax.jit(
            jax.grad(
                lambda q, k, v, seg, tiles: blocksparse_attention(q, k, v, seg, tiles, args.block).sum(),
                argnums=(0, 1, 2),
            )
        ),
    }
    key = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(kk, (rows_per_batch, ctx, heads, dim)) for kk in key)
    entry = {
        "rows_per_batch": rows_per_batch,
        "batches_timed": 0,
        "non_empty_tiles": 0,
        "causal_tiles": 0,
        "listed_tiles": 0,
        "useful_tokens": 0,
        "ideal_ratio_by_block": {},
    }
    times = {"dense": 0.0, "causal": 0.0, "blocksparse": 0.0}
    memory = {"dense": 0, "causal": 0, "blocksparse": 0}
    by_block = {b: [0, 0] for b in (64, 128) if ctx % b == 0}
    causal = device_tiles(tile_list(np.ones((rows_per_batch, ctx), np.int32), args.block))
    dense_ok = None
    for j, total, seg_np in plan_batches(
        lengths_of(name, args.docs, args.seed), ctx, rows_per_batch, args.rows, args.batches, args.seed
    ):
        seg = jnp.asarray(seg_np)
        tiles = tile_list(seg_np, args.block)
        entry["batches_total"] = total
        entry["batches_timed"] += 1
        entry["non_empty_tiles"] += int(tiles["tile_count"][0])
        entry["causal_tiles"] += int(causal["tile_count"][0])
        entry["listed_tiles"] += int(tiles["tile_row"].size)
        entry["useful_tokens"] += int((seg_np > 0).sum())
        for b in by_block:
            n, c = count_tiles(seg_np, b)
            by_block[b][0] += n
            by_block[b][1] += c
        sparse = device_tiles(tiles)
        if dense_ok is None:  # the same shapes for every batch of this ctx: compiled once
            programs = {
                "dense": compiled(grad["dense"], q, k, v, seg),
                "causal": compiled(grad["sparse"], q, k, v, seg, causal),
            }
            memory["dense"], memory["causal"] = temp_bytes(programs["dense"]), temp_bytes(programs["causal"])
            dense_ok = memory["dense"] <= args.dense_max_gib * 2**30
        program = compiled(grad["sparse"], q, k, v, seg, sparse)  # one program per padded list length
        memory["blocksparse"] = max(memory["blocksparse"], temp_bytes(program))
        times["blocksparse"] += timed(program, q, k, v, seg, sparse, repeats=args.repeats)
        times["causal"] += timed(programs["causal"], q, k, v, seg, causal, repeats=args.repeats)
        if dense_ok:
            times["dense"] += timed(programs["dense"], q, k, v, seg, repeats=args.repeats)
        print(f"  {name} ctx {ctx:,}: batch {j} of {total} timed", flush=True)
    entry["ideal_ratio"] = entry["causal_tiles"] / max(1, entry["non_empty_tiles"])
    entry["ideal_ratio_by_block"] = {str(b): c / max(1, n) for b, (n, c) in by_block.items()}
    for impl in times:
        entry[f"{impl}_s"] = times[impl] if impl != "dense" or dense_ok else None
        entry[f"{impl}_temp_bytes"] = memory[impl]
    entry["blocksparse_vs_causal"] = times["causal"] / times["blocksparse"]
    entry["blocksparse_vs_dense"] = times["dense"] / times["blocksparse"] if dense_ok else None
    entry["fraction_of_ideal"] = entry["blocksparse_vs_causal"] / entry["ideal_ratio"]
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    parser.add_argument("--distributions", nargs="+", default=["b", "heavy"], choices=[*DISTRIBUTIONS, "heavy"])
    parser.add_argument("--slots", type=int, default=16384, help="tokens per batch at every ctx")
    parser.add_argument("--block", type=int, default=128, choices=[64, 128], help="tile size (tokens)")
    parser.add_argument(
        "--rows",
        choices=["random", "all"],
        default="random",
        help="time every batch of the plan, or a seeded random sample of --batches whole batches",
    )
    parser.add_argument("--batches", type=int, default=1, help="batches sampled per ctx with --rows random")
    parser.add_argument("--docs", type=int, default=20000, help="documents drawn per distribution")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--dense-max-gib", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if any(ctx > args.slots for ctx in args.contexts):
        parser.error(f"--slots {args.slots} must be at least the largest ctx (one row per batch)")
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    results, table = {}, []
    for name in args.distributions:
        results[name] = {"label": HEAVY["label"] if name == "heavy" else DISTRIBUTIONS[name]["label"], "contexts": {}}
        for ctx in args.contexts:
            e = run_ctx(name, ctx, args)
            results[name]["contexts"][str(ctx)] = e
            mib = {impl: f"{e[f'{impl}_temp_bytes'] / 2**20:,.0f}" for impl in ("dense", "causal", "blocksparse")}
            table.append(
                [
                    f"({name}) {ctx:,}",
                    f"{e['rows_per_batch']} x {e['batches_timed']}/{e['batches_total']}",
                    f"{e['non_empty_tiles']:,}",
                    f"{e['causal_tiles']:,}",
                    f"{e['ideal_ratio']:.1f}x",
                    "-" if e["dense_s"] is None else f"{e['dense_s'] * 1e3:,.0f}",
                    f"{e['causal_s'] * 1e3:,.0f}",
                    f"{e['blocksparse_s'] * 1e3:,.0f}",
                    f"{e['blocksparse_vs_causal']:.1f}x",
                    f"{e['fraction_of_ideal']:.2f}",
                    "-" if e["blocksparse_vs_dense"] is None else f"{e['blocksparse_vs_dense']:.1f}x",
                    mib["dense"],
                    mib["causal"],
                    mib["blocksparse"],
                ]
            )
    load = os.getloadavg()
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    print_table(
        f"Attention fwd+bwd on packed rows: {args.slots:,} slots per batch, tile {args.block}, "
        f"{args.heads} heads x {args.head_dim}, float32, CPU ({machine}); row_selection={args.rows}"
        f"{f' ({args.batches} batches per ctx, seed {args.seed})' if args.rows == 'random' else ''}; "
        f"median of {args.repeats} per batch, summed; load {load_before[0]:.1f} -> {load[0]:.1f}",
        [
            "dist / ctx",
            "rows x batches",
            "non-empty tiles",
            "causal tiles",
            "ideal ratio",
            "dense ms",
            "causal flash ms",
            "blocksparse ms",
            "vs causal",
            "of ideal",
            "vs dense",
            "dense MiB",
            "causal MiB",
            "blocksparse MiB",
        ],
        table,
    )
    checks = []
    if "b" in results and "8192" in results["b"]["contexts"]:
        e = results["b"]["contexts"]["8192"]
        checks.append(
            (
                e["blocksparse_vs_causal"] >= 0.7 * e["ideal_ratio"],
                f"(b) ctx 8192: blocksparse_vs_causal {e['blocksparse_vs_causal']:.1f}x >= 0.7 x ideal "
                f"{e['ideal_ratio']:.1f}x = {0.7 * e['ideal_ratio']:.1f}x",
            )
        )
    worst = max(
        (e["blocksparse_temp_bytes"] / e["causal_temp_bytes"], f"({n}) {c}")
        for n, r in results.items()
        for c, e in r["contexts"].items()
    )
    checks.append(
        (
            worst[0] <= 1.0,
            f"blocksparse memory <= causal flash's at every ctx (largest share {worst[0]:.2f}, {worst[1]})",
        )
    )
    for ok, text in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    wall = time.perf_counter() - t_start
    print(
        f"machine: {machine}; load (1, 5, 15 min) before {tuple(round(x, 2) for x in load_before)}, after "
        f"{tuple(round(x, 2) for x in load)}; repeats {args.repeats}; wall {wall:,.0f} s"
    )
    path = write_json(
        "attention",
        {
            "row_selection": args.rows,
            "batches_per_ctx": args.batches if args.rows == "random" else "all",
            "seed": args.seed,
            "docs": args.docs,
            "block": args.block,
            "slots": args.slots,
            "heads": args.heads,
            "head_dim": args.head_dim,
            "repeats": args.repeats,
            "load_before": load_before,
            "load_after": load,
            "wall_s": wall,
            "timed": "attention forward + backward (q, k, v given), CPU, pure JAX",
            "distributions": results,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
