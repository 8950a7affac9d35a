"""``datatools train`` on 8 host CPU devices, each global batch's rows as drawn against balanced (config ``devices``).

The same batches, only the order of rows inside each differs: ``train()`` runs the pipeline with ``devices: null``
(drawn: the order every loader gives today) and with ``devices: 8`` (balanced by ``BalancedSchedule``), the batch
axis sharded over 8 host-platform CPU devices in contiguous slices and ``attention: blocksparse`` through
``sharded_blocksparse_attention`` (each device its own tile list, padded to one width per batch: the longest
device list's ``bucket_width``). Runs alternate (drawn, balanced, drawn, ...), ``--repeats`` each; per step the
median of its runs' times, steps that compiled a program in any run left out (a step of a new list width compiles),
and the process's CPU seconds between steps (every thread: the step and the loader), which a loaded machine disturbs
less than wall time.

Per step: MFU on useful FLOPs (train's count: 6 N T_useful + 6 L d sum s(s + 1)), the peak one measured CPU float32
matmul (the median of the runs' measurements, one figure for both orders: the ratio is the step times' alone); the
busiest device's in-document attention pairs and listed tiles over the mean device's, as ``train`` records them.
On a CPU the 8 devices share its cores: a step costs about every device's list width (padding entries run masked),
so what balancing saves shows as the width it takes off the longest list, not as a shorter wait for one device.

``--kernel`` also times the sharded kernel alone on batches of the same shape (``balance.py``'s ``--kernel``).

    python benchmarks/train_balance.py [--ctx 1024] [--batch 16] [--block 64] [--steps 6] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

DEVICES = 8
FLAG = f"--xla_force_host_platform_device_count={DEVICES}"  # before jax starts
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from _common import announce, lognormal_lengths, print_table, write_json  # noqa: E402

from datatools.io.sources.documents import ArrayDocuments  # noqa: E402
from datatools.kernels.balance import busiest_over_mean  # noqa: E402
from datatools.pipeline import parse_config  # noqa: E402
from datatools.train.loop import TrainConfig, TrainSection, train  # noqa: E402
from datatools.train.model import ModelConfig  # noqa: E402

ORDERS = {"drawn": None, "balanced": DEVICES}  # the pipeline's devices key


def run(args, docs: ArrayDocuments, devices: int | None):
    """One ``train()`` run (records, peak FLOP/s) of ``args.steps`` steps with the pipeline's ``devices``."""
    pipe = parse_config(
        {"source": {"path": "lognormal"}, "shuffle": {"kind": "full"}, "packing": {"ctx": args.ctx}}
        | {"batch_size": args.batch, "seed": args.seed, "devices": devices, "num_epochs": None}
    )
    model = ModelConfig(
        vocab_size=4096,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        attention="blocksparse",
        attention_block=args.block,
    )
    cpu = [time.process_time()]

    def on_step(rec) -> None:  # CPU seconds of the process (every thread) between steps: the step and the loader
        cpu.append(time.process_time())

    report = train(
        TrainConfig(pipe, model, TrainSection(steps=args.steps, warmup_steps=2)), documents=docs, on_step=on_step
    )
    assert report.summary.devices and len(report.summary.devices) == DEVICES
    return report.records, np.diff(cpu), report.summary.peak_flops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ctx", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16, help="rows a global batch (a multiple of 8)")
    parser.add_argument("--block", type=int, default=64, help="attention tile (tokens)")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kernel", action="store_true", help="also time the sharded kernel alone (balance.py)")
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="datatools-jax-cache-")  # a width compiled once is loaded in later runs
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    announce(
        args.repeats,
        f"{DEVICES} host CPU devices on {os.cpu_count()} cores; ctx {args.ctx}, {args.batch} rows "
        f"({args.batch // DEVICES} a device), tile {args.block}; runs alternate drawn / balanced",
    )
    lengths = lognormal_lengths(args.docs, median=400, mean=800, low=2, high=args.ctx, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    docs = ArrayDocuments(
        rng.integers(1, 4096, int(lengths.sum())).astype(np.int32), np.concatenate(([0], np.cumsum(lengths)))
    )
    runs: dict[str, list] = {name: [] for name in ORDERS}
    cpu_runs: dict[str, list] = {name: [] for name in ORDERS}
    peaks = []
    for _ in range(args.repeats):
        for name, devices in ORDERS.items():
            records, cpu, peak = run(args, docs, devices)
            runs[name].append(records)
            cpu_runs[name].append(cpu)
            peaks.append(peak)
    peak = float(np.median(peaks))
    for j in range(args.steps):  # the same batches: the same useful FLOPs and loss in both orders
        drawn, balanced = runs["drawn"][0][j], runs["balanced"][0][j]
        assert drawn.flops == balanced.flops and drawn.useful_tokens == balanced.useful_tokens
    steps = []
    for j in range(args.steps):
        row: dict = {"step": j + 1}
        timed = True
        for name in ORDERS:
            recs = [records[j] for records in runs[name]]
            timed &= not any(r.compiled for r in recs)
            seconds = float(np.median([r.seconds for r in recs]))
            row |= {
                f"{name}_s": seconds,
                f"{name}_cpu_s": float(np.median([cpu[j] for cpu in cpu_runs[name]])),
                f"{name}_mfu": recs[0].flops / seconds / peak,
                f"{name}_attention": recs[0].device_attention,
                f"{name}_tiles": busiest_over_mean(recs[0].device_tiles, DEVICES),
                f"{name}_tiles_max": max(recs[0].device_tiles),
                f"{name}_loss": recs[0].loss,
            }
        row["flops"] = runs["drawn"][0][j].flops
        row["timed"] = timed
        steps.append(row)
    timed = [r for r in steps if r["timed"]]
    total = {
        name: sum(r["flops"] for r in timed) / sum(r[f"{name}_s"] for r in timed) / peak if timed else float("nan")
        for name in ORDERS
    }
    print_table(
        f"datatools train, {DEVICES} host CPU devices, blocksparse (sharded, a tile list a device): per step, medians "
        f"of {args.repeats} alternating runs; peak {peak / 1e9:.1f} GFLOP/s (measured CPU float32 matmul)",
        [
            "step",
            "drawn s",
            "balanced s",
            "CPU s drawn / balanced",
            "MFU drawn",
            "MFU balanced",
            "attention max/mean drawn / balanced",
            "tiles max/mean drawn / balanced",
            "busiest tiles drawn / balanced",
        ],
        [
            [
                str(r["step"]) + ("" if r["timed"] else " (compiled)"),
                r["drawn_s"],
                r["balanced_s"],
                f"{r['drawn_cpu_s']:.1f} / {r['balanced_cpu_s']:.1f}",
                f"{r['drawn_mfu']:.2%}",
                f"{r['balanced_mfu']:.2%}",
                f"{r['drawn_attention']:.3f} / {r['balanced_attention']:.3f}",
                f"{r['drawn_tiles']:.3f} / {r['balanced_tiles']:.3f}",
                f"{r['drawn_tiles_max']} / {r['balanced_tiles_max']}",
            ]
            for r in steps
        ],
    )
    cpu_total = {name: sum(r[f"{name}_cpu_s"] for r in timed) for name in ORDERS}
    print(
        f"useful-FLOPs MFU over the {len(timed)} steps timed in both orders: drawn {total['drawn']:.2%}, balanced "
        f"{total['balanced']:.2%}; CPU seconds (every thread, the loader's too): drawn {cpu_total['drawn']:.1f}, "
        f"balanced {cpu_total['balanced']:.1f}; load {' / '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    kernel = None
    if args.kernel:
        from balance import kernel_times

        kernel = kernel_times(
            argparse.Namespace(
                kernel_devices=DEVICES,
                kernel_ctx=args.ctx,
                block=args.block,
                kernel_batch=args.batch,
                seed=args.seed,
                kernel_batches=2,
                kernel_repeats=args.repeats,
            )
        )
    payload = {
        "devices": DEVICES,
        "cores": os.cpu_count(),
        "ctx": args.ctx,
        "batch": args.batch,
        "block": args.block,
        "model": {"d_model": args.d_model, "layers": args.layers, "heads": args.heads},
        "peak_flops": peak,
        "peak_source": "measured CPU float32 matmul (median of the runs)",
        "steps": steps,
        "mfu": total,
        "cpu_s": cpu_total,
        "load_end": os.getloadavg(),
        "kernel": kernel,
    }
    print(f"wrote {write_json('train_balance', payload)}")


if __name__ == "__main__":
    main()
