"""Attention work per device, the rows of each global batch as drawn against balanced (config key ``devices``).

A step waits for its busiest device; trainers give device d of D the contiguous rows ``[d B / D, (d + 1) B / D)``
of a global batch of B rows. For each corpus (lognormal lengths median 400 mean 800, Pareto 1.1 from 200 tokens, and
the real-text corpora of ``benchmarks/corpora.py`` when built), the pipeline's own schedule is built from the
lengths (``build_schedule``: planned packing, best fit decreasing, rows in a full Feistel shuffle; ``--modes``
adds streaming packing and the length curriculum) at ctx 8192, and every global batch of the epoch is counted, as
drawn (what every loader does today: the alternative) and as ``BalancedSchedule`` orders it for D devices:

* ``tiles max/mean``: the busiest device's in-document ``--block`` x ``--block`` tiles (what a block-sparse
  kernel executes) over the mean device's, mean and p90 over the batches; ``bound``: the least any order of the
  batch's rows can give (:func:`~datatools.kernels.balance.least_busiest`: exact at 1 and 2 rows a device, a lower
  bound above; where it is above a target, reordering alone cannot reach it);
* ``tokens max/mean``: the same for real tokens; ``padding``: 1 - real tokens / slots (the same rows: the same
  padding); ``groups/batch``: distinct stored groups of ``--group`` consecutive documents in a batch, as
  ``shuffle-report`` counts them (the same rows: the same figure);
* ``order ms``: the balanced order's cost per batch (lengths to order, one host; every host computes it).

Targets (issue 53): tiles max/mean <= 1.05 at >= 8 rows a device, <= 1.15 at 2; padding unchanged. At 2 rows a
device the rows ``balance_across`` (``--across``: 2, 4, 8) exchanges between consecutive batches are measured too
(rows ``D (2), across G``): the batches' contents change, so ``bound`` (an order inside the batch) no longer
limits them, and ``groups/batch`` says what the exchange costs the shuffle.

``--kernel`` also times block-sparse attention (forward + backward) sharded over 8 host CPU devices with
``jax.shard_map``, each device its own tile list padded to one width, drawn against balanced batches (medians of
alternating runs; the list padding each order needs).

    python benchmarks/balance.py [--docs 400000] [--batch 128 256] [--devices 4 16 64 128] [--modes planned]
                                 [--kernel]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _common import announce, lognormal_lengths, print_table, write_json

from datatools.grain.balanced_schedule import BalancedSchedule, row_work
from datatools.io.sources.documents import ArrayDocuments
from datatools.kernels.balance import busiest_over_mean, least_busiest
from datatools.pipeline import parse_config
from datatools.pipeline.schedules import build_schedule

CTX = 8192


def synthetic(name: str, n: int, seed: int) -> np.ndarray:
    """Document lengths (tokens): ``lognormal`` (median 400, mean 800, <= 8192) or ``pareto`` (alpha 1.1 from 200
    tokens, <= 65,536; documents longer than ctx are split)."""
    if name == "lognormal":
        return lognormal_lengths(n, median=400, mean=800, low=1, high=CTX, seed=seed)
    rng = np.random.default_rng(seed)
    return ((rng.pareto(1.1, n) + 1) * 200).round().clip(1, 65536).astype(np.int64)


def corpora(names: list[str], n: int, seed: int) -> dict[str, np.ndarray]:
    """Lengths of each corpus: the synthetic ones, and the real-text corpora already built (skipped, and said, if
    not: ``python benchmarks/corpora.py`` builds them)."""
    out = {}
    for name in names:
        if name in ("lognormal", "pareto"):
            out[name] = synthetic(name, n, seed)
            continue
        from corpora import CORPORA, load

        if not (CORPORA / f"{name}.npz").exists():
            print(f"{name}: not built (python benchmarks/corpora.py --corpus {name}); skipped")
            continue
        out[name] = load(name)[1]
    return out


def section(mode: str, batch: int) -> dict:
    if mode == "curriculum":
        return {"curriculum": {"lengths": [1024, 2048, 4096, 8192], "tokens_per_batch": batch * CTX, "tile": 1024}}
    if mode == "streaming":
        return {"packing": {"ctx": CTX, "mode": "streaming", "window": 4096}, "batch_size": batch}
    return {"packing": {"ctx": CTX}, "batch_size": batch}


def groups_per_batch(plan, group: int) -> int:
    """Distinct groups of ``group`` consecutive documents among a batch's pieces (shuffle-report's figure)."""
    return int(np.unique(plan.doc // group).shape[0])


def measure(inner, balanced: list[BalancedSchedule], block: int, group: int) -> list[dict]:
    """Every batch of epoch 0, as drawn and as each of ``balanced`` orders it: the figures of one table row per
    device count (and ``balance_across``)."""
    n = inner.num_batches(0)
    acc = [{k: [] for k in ("before", "after", "bound", "tok_before", "tok_after", "ms", "groups")} for _ in balanced]
    groups_before, real, slots = [], 0, 0
    for j in range(n):
        rows = inner.batch_rows(0, j)
        plan = inner.rows_plan(0, j, 0, rows)
        tiles, tokens = row_work(plan, rows, block)
        real += int(tokens.sum())
        slots += rows * plan.ctx
        groups_before.append(groups_per_batch(plan, group))
        for b, a in zip(balanced, acc):
            devices = b.devices
            t0 = time.perf_counter()
            b_tiles, b_tokens = b.work(0, j)
            a["ms"].append((time.perf_counter() - t0) * 1e3)
            a["before"].append(busiest_over_mean(tiles, devices))
            a["after"].append(busiest_over_mean(b_tiles, devices))
            a["bound"].append(least_busiest(tiles, devices))
            a["tok_before"].append(busiest_over_mean(tokens, devices))
            a["tok_after"].append(busiest_over_mean(b_tokens, devices))
            if b.across == 1:
                assert np.array_equal(np.sort(b_tiles), np.sort(tiles))  # the same rows
            a["groups"].append(groups_per_batch(b.rows_plan(0, j, 0, rows), group))
    out = []
    for b, a in zip(balanced, acc):
        out.append(
            {
                "devices": b.devices,
                "balance_across": b.across,
                "rows_per_device": inner.row_counts[0] // b.devices,
                "batches": n,
                "tiles_before_mean": float(np.mean(a["before"])),
                "tiles_before_p90": float(np.percentile(a["before"], 90)),
                "tiles_after_mean": float(np.mean(a["after"])),
                "tiles_after_p90": float(np.percentile(a["after"], 90)),
                "tiles_after_max": float(np.max(a["after"])),
                "bound_mean": float(np.mean(a["bound"])),
                "tokens_before_mean": float(np.mean(a["tok_before"])),
                "tokens_after_mean": float(np.mean(a["tok_after"])),
                "padding_before": 1 - real / slots,
                "padding_after": 1 - real / slots,  # the same rows (the same rows of each group across batches)
                "groups_per_batch_before": float(np.mean(groups_before)),
                "groups_per_batch_after": float(np.mean(a["groups"])),
                "order_ms": float(np.median(a["ms"])),
            }
        )
    return out


def kernel_times(args) -> list[dict]:
    """Block-sparse attention (forward + backward) on ``--kernel-devices`` host CPU devices, ``jax.shard_map`` over
    the batch axis, each device its own tile list padded to one width: drawn against balanced batches, medians of
    alternating runs. Every device runs the common width's entries (padding masked), so a step's time follows the
    busiest device's list."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh

    from datatools import materialize, pack_lengths
    from datatools.kernels.attention_blocks import device_tile_lists, row_tiles
    from datatools.kernels.balance import balance_key, balance_order
    from datatools.train.attention import sharded_blocksparse_attention

    devices, ctx, block, rows = args.kernel_devices, args.kernel_ctx, args.block, args.kernel_batch
    mesh = Mesh(np.array(jax.devices()[:devices]), ("data",))
    lengths = lognormal_lengths(20_000, median=400, mean=800, low=1, high=ctx, seed=args.seed)
    plan = pack_lengths(lengths, ctx)
    work = row_tiles(plan.row_splits, plan.length, block)[:, 1]
    tokens = np.add.reduceat(plan.length.astype(np.int64), plan.row_splits[:-1])
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(plan.num_rows)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    flat = np.zeros(int(offsets[-1]), np.int32)
    q, k, v = (jnp.asarray(rng.standard_normal((rows, ctx, 2, 32)), jnp.float32) for _ in range(3))
    out = []
    for j in range(args.kernel_batches):
        drawn = order[j * rows : (j + 1) * rows]
        balanced = drawn[balance_order(balance_key(work[drawn], tokens[drawn], ctx), devices)]
        progs = {}
        for name, sel in (("drawn", drawn), ("balanced", balanced)):
            seg = jnp.asarray(materialize(plan, flat, offsets, rows=sel, check_values=False)["segment_ids"])
            tiles = device_tile_lists(np.asarray(seg), block, devices)

            def loss(q, k, v, seg=seg, tiles=tiles):
                return (sharded_blocksparse_attention(q, k, v, seg, tiles, block, mesh) ** 2).sum()

            fn = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
            jax.block_until_ready(fn(q, k, v))  # compiled, untimed
            progs[name] = (fn, tiles)
        times: dict[str, list[float]] = {"drawn": [], "balanced": []}
        for _ in range(args.kernel_repeats):  # alternating runs
            for name, (fn, _) in progs.items():
                t0 = time.perf_counter()
                jax.block_until_ready(fn(q, k, v))
                times[name].append(time.perf_counter() - t0)
        row = {"batch": j}
        for name, (_, tiles) in progs.items():
            count = tiles["tile_count"][:, 0]
            width = tiles["tile_row"].shape[1]
            row |= {
                f"{name}_s": float(np.median(times[name])),
                f"{name}_width": int(width),
                f"{name}_tiles_max": int(count.max()),
                f"{name}_tiles_mean": float(count.mean()),
                f"{name}_padding": 1 - float(count.sum()) / (devices * width),
            }
        out.append(row)
    print_table(
        f"block-sparse attention, fwd + bwd, {devices} host CPU devices (shard_map), ctx {ctx}, tile {block}, "
        f"{rows} rows a batch, 2 heads x 32: medians of {args.kernel_repeats} alternating runs",
        [
            "batch",
            "drawn s",
            "balanced s",
            "speed-up",
            "tiles max/mean drawn",
            "balanced",
            "width drawn / balanced",
            "list padding drawn / balanced",
        ],
        [
            [
                str(r["batch"]),
                r["drawn_s"],
                r["balanced_s"],
                f"{r['drawn_s'] / r['balanced_s']:.2f}x",
                f"{r['drawn_tiles_max'] / r['drawn_tiles_mean']:.3f}",
                f"{r['balanced_tiles_max'] / r['balanced_tiles_mean']:.3f}",
                f"{r['drawn_width']} / {r['balanced_width']}",
                f"{r['drawn_padding']:.1%} / {r['balanced_padding']:.1%}",
            ]
            for r in out
        ],
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=400_000, help="documents of each synthetic corpus")
    parser.add_argument("--corpora", nargs="+", default=["lognormal", "pareto", "man", "stdlib", "docstrings"])
    parser.add_argument("--batch", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--devices", type=int, nargs="+", default=[4, 16, 64, 128])
    parser.add_argument("--modes", nargs="+", default=["planned"], choices=["planned", "streaming", "curriculum"])
    parser.add_argument("--block", type=int, default=128, help="attention tile (tokens) the work is counted at")
    parser.add_argument("--group", type=int, default=64, help="documents a stored group (shuffle-report)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--across",
        type=int,
        nargs="*",
        default=[2, 4, 8],
        help="balance_across values (batches rows are exchanged between) measured at 2 rows a device",
    )
    parser.add_argument("--out", default="balance", help="results/NAME.json")
    parser.add_argument("--kernel", action="store_true", help="also time block-sparse attention on host CPU devices")
    parser.add_argument("--kernel-devices", type=int, default=8)
    parser.add_argument("--kernel-ctx", type=int, default=2048)
    parser.add_argument("--kernel-batch", type=int, default=32, help="rows a batch of the kernel timing")
    parser.add_argument("--kernel-batches", type=int, default=2)
    parser.add_argument("--kernel-repeats", type=int, default=3)
    args = parser.parse_args()
    if args.kernel:  # before jax starts
        flag = f"--xla_force_host_platform_device_count={args.kernel_devices}"
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    announce(1, f"ctx {CTX}, tile {args.block}; every batch of one epoch counted (no timing but the order's)")
    results = []
    for name, lengths in corpora(args.corpora, args.docs, args.seed).items():
        docs = ArrayDocuments(np.zeros(int(lengths.sum()), np.int32), np.concatenate(([0], np.cumsum(lengths))))
        for mode in args.modes:
            for batch in args.batch:
                cfg = parse_config(
                    {"source": {"path": name}, "shuffle": {"kind": "full"}, "seed": args.seed, **section(mode, batch)}
                )
                try:
                    inner, _ = build_schedule(cfg, docs)
                except ValueError as exc:  # fewer rows than one batch
                    print(f"{name}, {mode}, batch {batch}: {exc}; skipped")
                    continue
                if inner.num_batches(0) == 0:
                    print(f"{name}, {mode}: fewer rows than one global batch of {batch}; skipped")
                    continue
                devices = [d for d in args.devices if all(r % d == 0 for r in inner.row_counts)]
                balanced = [
                    BalancedSchedule(inner, devices=d, block=args.block, across=g)
                    for d in devices
                    for g in [1] + (args.across if mode != "curriculum" and batch // d <= 2 < batch else [])
                ]
                rows = measure(inner, balanced, args.block, args.group)
                for r in rows:
                    results.append(
                        {"corpus": name, "documents": int(lengths.shape[0]), "mode": mode, "batch": batch, **r}
                    )
                print_table(
                    f"{name} ({lengths.shape[0]:,} documents), {mode}, global batch {batch}: tiles per device, "
                    f"max/mean (mean, p90 over {rows[0]['batches']} batches)",
                    [
                        "devices (rows each)",
                        "drawn",
                        "balanced",
                        "bound",
                        "tokens drawn",
                        "tokens balanced",
                        "padding",
                        "groups/batch",
                        "order ms",
                    ],
                    [
                        [
                            f"{r['devices']} ({r['rows_per_device']})"
                            + (f", across {r['balance_across']}" if r["balance_across"] > 1 else ""),
                            f"{r['tiles_before_mean']:.3f} (p90 {r['tiles_before_p90']:.3f})",
                            f"{r['tiles_after_mean']:.3f} (p90 {r['tiles_after_p90']:.3f})",
                            f"{r['bound_mean']:.3f}",
                            f"{r['tokens_before_mean']:.3f}",
                            f"{r['tokens_after_mean']:.3f}",
                            f"{r['padding_before']:.4f}",
                            f"{r['groups_per_batch_before']:.1f} / {r['groups_per_batch_after']:.1f}",
                            r["order_ms"],
                        ]
                        for r in rows
                    ],
                )
    kernel = kernel_times(args) if args.kernel else None
    payload = {"ctx": CTX, "block": args.block, "group": args.group, "results": results, "kernel": kernel}
    path = write_json(args.out, payload)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
