"""Bucketing: useful-token fraction and distinct shapes, padding strategies side by side.

On the three length distributions of the packing benchmark (documents longer than
ctx split into ctx-sized pieces first, so every strategy gets the same rows and no
token is lost), batches of 32 rows:
- pad-to-max: every row ctx long (1 shape);
- pad-to-batch-max: each batch padded to its longest row, rounded up to 128;
- power-of-two boundaries (tf.data's bucket_by_sequence_length style): 16, 32, ... ctx;
- optimal tile-aligned boundaries (datatools.bucket_boundaries, tile 128), K = 2, 4, 8;
- best_fit_decreasing packing, for reference (needs segment ids).

    python benchmarks/bucket.py [--docs 200000]
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import DISTRIBUTIONS, announce, distribution, median_time, print_table, write_json

from datatools import bucket_batches, bucket_boundaries, pack_lengths, padding_efficiency  # noqa: E402
from datatools.kernels.packing import cut_pieces  # noqa: E402

BATCH = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3, help="runs of the timed DP (median)")
    args = parser.parse_args()
    announce(args.repeats, "efficiencies are exact; only the boundary DP is timed")
    bucket_boundaries([1, 2, 300], 2)  # compile / load the cache
    out = {}
    for name, spec in DISTRIBUTIONS.items():
        lengths, ctx = distribution(name, args.docs)
        _, _, rows, _, _ = cut_pieces(lengths, ctx, "split")  # split at ctx: the same rows for everyone
        base = padding_efficiency(rows, max_len=ctx, batch_size=BATCH, tile=128)
        entries = [
            dict(strategy="pad to max (ctx)", efficiency=base["pad_to_max"]["efficiency"], shapes=1),
            dict(
                strategy="pad to batch max (tile 128)",
                efficiency=base["pad_to_batch_max"]["efficiency"],
                shapes=base["pad_to_batch_max"]["shapes"],
            ),
        ]
        pow2 = [b for b in (2 ** np.arange(4, 20)).tolist() if b < ctx] + [ctx]
        plan = bucket_batches(rows, pow2, BATCH)
        entries.append(
            dict(strategy=f"power-of-two boundaries ({len(pow2)})", efficiency=plan.efficiency, shapes=len(plan.shapes))
        )
        for k in (2, 4, 8):
            dp_s, b = median_time(lambda: bucket_boundaries(rows, k, tile=128, max_len=ctx), args.repeats)
            plan = bucket_batches(rows, b, BATCH)
            entries.append(
                dict(
                    strategy=f"optimal K={k}: {b.tolist()}",
                    efficiency=plan.efficiency,
                    shapes=len(plan.shapes),
                    dp_seconds=dp_s,
                )
            )
        packed = pack_lengths(rows, ctx)
        entries.append(dict(strategy="packing (best_fit_decreasing)", efficiency=packed.efficiency, shapes=1))
        pad = entries[0]["efficiency"]
        print_table(
            f"({name}) {spec['label']}: {args.docs:,} docs, batch {BATCH}",
            ["strategy", "efficiency", "distinct shapes", "x compute saved vs pad-to-max"],
            [[e["strategy"], f"{e['efficiency']:.2%}", e["shapes"], f"{e['efficiency'] / pad:.2f}x"] for e in entries],
        )
        out[name] = {"ctx": ctx, "strategies": entries}
    print(f"wrote {write_json('bucket', {'docs': args.docs, 'batch_size': BATCH, 'distributions': out})}")


if __name__ == "__main__":
    main()
