"""Packing: datatools' numba planners against Grain's packing iterators.

One run, the same documents for everyone, on the three length distributions of
benchmarks/_common.py. For each packer: documents/s, tokens/s, efficiency
(real tokens / (rows x ctx)), rows, tokens lost, and the speed ratio to Grain's
best fit with 256 bins. datatools is timed twice: planning only (what a planned
pipeline pays once) and planning + building every row with real tokens (the work
Grain's iterators do). Then the targets, at 1M documents. Grain's first/best fit refuse documents longer
than ctx, so they get the documents pre-cut into ctx-sized pieces (the same pieces
datatools' default overflow="split" makes), cut before the clock starts.

    python benchmarks/pack.py [--docs 100000] [--scale-docs 1000000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _common import DISTRIBUTIONS, distribution, fmt_rate, median_time, one_core, print_table, write_json

one_core()

import grain  # noqa: E402

from datatools import ALGORITHMS, materialize, pack_lengths  # noqa: E402

GRAIN_PACKERS = [
    ("grain first_fit/64", grain.experimental.FirstFitPackIterDataset, 64),
    ("grain first_fit/256", grain.experimental.FirstFitPackIterDataset, 256),
    ("grain best_fit/64", grain.experimental.BestFitPackIterDataset, 64),
    ("grain best_fit/256", grain.experimental.BestFitPackIterDataset, 256),
    ("grain concat_then_split", grain.experimental.ConcatThenSplitIterDataset, None),
]


def run_grain(cls, bins, docs, ctx):
    source = grain.MapDataset.source(docs).to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    if bins is None:
        packed = cls(source, length_struct={"tokens": ctx})
    else:
        packed = cls(source, length_struct={"tokens": ctx}, num_packing_bins=bins, shuffle_bins=False)
    rows = 0
    real = 0
    t0 = time.perf_counter()
    for ex in packed:
        rows += 1
        real += int(np.count_nonzero(ex["tokens_segment_ids"]))
    return time.perf_counter() - t0, rows, real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000, help="documents per distribution in the comparison")
    parser.add_argument("--scale-docs", type=int, default=1_000_000, help="documents for the datatools throughput targets")
    args = parser.parse_args()

    t0 = time.perf_counter()
    for algorithm in ALGORITHMS:
        pack_lengths(np.array([3, 900, 5000, 7]), 2048, algorithm=algorithm)
    compile_s = time.perf_counter() - t0
    print(f"numba first call (compile, or load from the cache=True cache): {compile_s:.2f} s")

    results = {"docs": args.docs, "compile_or_cache_load_s": compile_s, "distributions": {}}
    for name, spec in DISTRIBUTIONS.items():
        lengths, ctx = distribution(name, args.docs)
        total = int(lengths.sum())
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        flat = np.ones(total, dtype=np.int32)
        docs = [{"tokens": flat[offsets[i] : offsets[i + 1]]} for i in range(len(lengths))]
        # Grain's fit packers refuse documents longer than ctx: give them the same ctx-sized
        # pieces that datatools' overflow="split" makes (nothing lost), cut before timing.
        pieces = [{"tokens": d["tokens"][s : s + ctx]} for d in docs for s in range(0, len(d["tokens"]), ctx)]
        entries = []
        for label, cls, bins in GRAIN_PACKERS:
            secs, rows, real = run_grain(cls, bins, docs if bins is None else pieces, ctx)
            entries.append(dict(packer=label, seconds=secs, rows=rows, real_tokens=real, lost=total - real))
        for algorithm in ALGORITHMS:
            plan_s, plan = median_time(lambda: pack_lengths(lengths, ctx, algorithm=algorithm))
            full_s, _ = median_time(lambda: materialize(pack_lengths(lengths, ctx, algorithm=algorithm), flat, offsets), 3)
            entries.append(dict(packer=f"datatools {algorithm}", seconds=plan_s, seconds_with_rows=full_s,
                                rows=plan.num_rows, real_tokens=plan.kept_tokens, lost=plan.dropped_tokens))
        grain_ref = next(e for e in entries if e["packer"] == "grain best_fit/256")["seconds"]
        table = []
        for e in entries:
            e["docs_per_s"] = args.docs / e["seconds"]
            e["tokens_per_s"] = total / e["seconds"]
            e["efficiency"] = e["real_tokens"] / (e["rows"] * ctx)
            e["speedup_vs_grain_best_fit_256"] = grain_ref / e["seconds"]
            with_rows = e.get("seconds_with_rows")
            if with_rows:
                e["docs_per_s_with_rows"] = args.docs / with_rows
                e["speedup_with_rows_vs_grain_best_fit_256"] = grain_ref / with_rows
            table.append([e["packer"], fmt_rate(e["docs_per_s"]),
                          fmt_rate(e["docs_per_s_with_rows"]) if with_rows else "-", fmt_rate(e["tokens_per_s"]),
                          f"{e['efficiency']:.2%}", e["rows"], e["lost"],
                          f"{e['speedup_vs_grain_best_fit_256']:.0f}x"
                          + (f" / {e['speedup_with_rows_vs_grain_best_fit_256']:.0f}x" if with_rows else "")])
        lb = -(-total // ctx)
        print_table(f"({name}) {spec['label']}: {args.docs:,} docs, {total:,} tokens, lower bound {lb:,} rows",
                    ["packer", "docs/s (plan)", "docs/s (+rows)", "tokens/s", "efficiency", "rows", "tokens lost",
                     "x grain bf/256 (plan / +rows)"], table)
        results["distributions"][name] = {"ctx": ctx, "tokens": total, "lower_bound_rows": lb, "packers": entries}

    # Targets at scale, datatools only.
    targets = {}
    scale_rows = []
    for name in DISTRIBUTIONS:
        lengths, ctx = distribution(name, args.scale_docs, seed=1)
        for algorithm in ("best_fit_decreasing", "first_fit", "best_fit"):
            secs, plan = median_time(lambda: pack_lengths(lengths, ctx, algorithm=algorithm))
            gap = plan.num_rows / plan.lower_bound_rows - 1
            scale_rows.append([f"({name}) {algorithm}", fmt_rate(args.scale_docs / secs), f"{plan.efficiency:.3%}",
                               plan.num_rows, plan.lower_bound_rows, f"{gap:.3%}"])
            targets[f"{name}/{algorithm}"] = {"docs_per_s": args.scale_docs / secs, "efficiency": plan.efficiency,
                                              "rows": plan.num_rows, "lower_bound_rows": plan.lower_bound_rows}
    print_table(f"datatools at scale: {args.scale_docs:,} documents, one core",
                ["distribution / algorithm", "docs/s", "efficiency", "rows", "lower bound", "rows over bound"], scale_rows)
    grain_bf256 = {n: next(e for e in d["packers"] if e["packer"] == "grain best_fit/256")["efficiency"]
                   for n, d in results["distributions"].items()}
    checks = {
        "bfd >= 10M docs/s at ctx 2048": targets["b/best_fit_decreasing"]["docs_per_s"] >= 10e6,
        "bfd rows within 0.5% of bound on (b)": targets["b/best_fit_decreasing"]["rows"] <= 1.005 * targets["b/best_fit_decreasing"]["lower_bound_rows"],
        "bfd rows within 0.5% of bound on (c)": targets["c/best_fit_decreasing"]["rows"] <= 1.005 * targets["c/best_fit_decreasing"]["lower_bound_rows"],
        "bfd efficiency >= 99.5% on (a)": targets["a/best_fit_decreasing"]["efficiency"] >= 0.995,
        "input-order first/best fit >= grain best_fit/256 efficiency": all(
            e["efficiency"] >= grain_bf256[n] - 1e-12
            for n, d in results["distributions"].items() for e in d["packers"]
            if e["packer"] in ("datatools first_fit", "datatools best_fit")),
    }
    for k, v in checks.items():
        print(f"  [{'PASS' if v else 'FAIL'}] {k}")
    results.update(scale_docs=args.scale_docs, scale=targets, targets=checks)
    print(f"wrote {write_json('pack', results)}")


if __name__ == "__main__":
    main()
