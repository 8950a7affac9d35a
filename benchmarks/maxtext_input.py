"""MaxText's input pipeline against datatools feeding MaxText, inside MaxText itself.

Runs in MaxText's venv (``make test-clients`` builds it)::

    .clients/maxtext/bin/python benchmarks/maxtext_input.py [--docs 50000] [--runs 3]

(in any other Python it says so and exits 0, so ``make bench`` passes over it).

50,000 pre-tokenized documents of distribution (a) (mean ~230 tokens, the 95M-model run's
data shape) as Parquet; MaxText's config: ``max_target_length`` 1024,
``per_device_batch_size`` 32 on one CPU device (32 rows per host, so 32 packing bins),
no shuffle, one epoch, no workers. Each pipeline is MaxText's own
``create_data_iterator(config, mesh)`` (a ``MultiHostDataLoadIterator``: batches become
jax arrays), iterated to the end: seconds (median of ``--runs``), batches, real
tokens/s and padding. The MaxText rows: ``packing: false``; first fit with
``max_segments_per_seq: 4`` (what ``cudnn_flash_te`` users set); best fit (no cap). The
datatools rows: ``datatools.integrations.maxtext.create_data_iterator`` with planned
best-fit-decreasing packing, with the same cap and without. The last column is what
``datatools analyze-padding --maxtext-config`` predicts for MaxText's rows.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import announce, distribution, fmt_rate, print_table, write_json  # noqa: E402

CTX = 1024
PER_HOST = 32


def maxtext_config(data: Path, out: Path, packing: bool, packing_type: str, cap: int):
    import maxtext
    from maxtext.configs import pyconfig

    pkg = Path(maxtext.__file__).parent
    argv = [
        "bench",
        str(pkg / "configs" / "base.yml"),
        "run_name=bench",
        f"base_output_directory={out}",
        "dataset_type=grain",
        "grain_file_type=parquet",
        f"grain_train_files={data}",
        "train_data_columns=['tokens']",
        "tokenize_train_data=False",
        f"packing={packing}",
        f"grain_packing_type={packing_type}",
        f"max_segments_per_seq={cap}",
        f"max_target_length={CTX}",
        f"per_device_batch_size={PER_HOST}",
        "enable_data_shuffling=False",
        "grain_worker_count=0",
        "enable_checkpointing=False",
        "hardware=cpu",
        "skip_jax_distributed_system=True",
        "enable_goodput_recording=False",
        "monitor_goodput=False",
        "attention=dot_product",
        f"tokenizer_path={pkg / 'assets' / 'tokenizers' / 'tokenizer.llama2'}",
    ]
    return pyconfig.initialize(argv)


def drain(make_iterator) -> tuple[float, int, int, int]:
    """(seconds, batches, real tokens, slots) of one pass over the iterator ``make_iterator()`` returns."""
    t0 = time.perf_counter()
    it = make_iterator()
    batches = real = slots = 0
    while True:
        try:
            b = next(it)
        except StopIteration:
            break
        # token ids here are >= 1; MaxText pads with its pad id (-1 for llama2), datatools with 0
        inputs = np.asarray(b["inputs"])
        real += int(np.count_nonzero(inputs > 0))
        slots += inputs.size
        batches += 1
    return time.perf_counter() - t0, batches, real, slots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    announce(args.runs)
    try:
        import maxtext  # noqa: F401
    except ImportError:
        print("skipped: needs MaxText; run it with .clients/maxtext/bin/python (make test-clients builds it)")
        return 0
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import pyarrow as pa
    import pyarrow.parquet as pq
    from maxtext.input_pipeline import input_pipeline_interface as interface
    from maxtext.utils import maxtext_utils

    from datatools.analysis.maxtext_simulation import maxtext_view, read_maxtext_config
    from datatools.integrations.maxtext import create_data_iterator

    lengths, _ = distribution("a", args.docs, seed=0)
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 32000, int(lengths.sum())).astype(np.int32)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    tmp = Path(tempfile.mkdtemp(prefix="maxtext-bench-"))
    data = tmp / "docs.parquet"
    column = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(tokens))
    pq.write_table(pa.table({"tokens": column}), data, row_group_size=16384)

    original = interface.create_data_iterator
    cases = [
        ("MaxText, packing: false", "maxtext", False, "first_fit", -1),
        ("MaxText, first_fit, max_segments_per_seq 4", "maxtext", True, "first_fit", 4),
        ("MaxText, best_fit (no cap)", "maxtext", True, "best_fit", -1),
        ("datatools BFD, max_segments 4", "datatools", True, "first_fit", 4),
        ("datatools BFD, no cap", "datatools", True, "first_fit", -1),
    ]
    rows, results = [], []
    for label, who, packing, kind, cap in cases:
        config = maxtext_config(data, tmp / "out", packing, kind, cap)
        mesh = maxtext_utils.get_mesh_from_config(config)
        pipeline = None if who == "maxtext" else {"packing": {"mode": "planned"}, "shuffle": {"kind": "none"}}

        def make(config=config, mesh=mesh, pipeline=pipeline):
            if pipeline is None:
                return original(config, mesh)[0]
            return create_data_iterator(config, mesh, pipeline=pipeline)[0]

        timings = [drain(make) for _ in range(args.runs)]
        seconds = float(np.median([t[0] for t in timings]))
        _, batches, real, slots = timings[-1]
        predicted = None
        if who == "maxtext":
            settings = read_maxtext_config(
                None,
                [
                    f"max_target_length={CTX}",
                    f"packing={packing}",
                    f"grain_packing_type={kind}",
                    f"max_segments_per_seq={cap}",
                    f"per_device_batch_size={PER_HOST}",
                    "tokenize_train_data=false",
                    "enable_data_shuffling=false",
                ],
            )
            predicted = maxtext_view(lengths, settings).padding
        results.append(
            {
                "pipeline": label,
                "seconds": seconds,
                "batches": batches,
                "real_tokens": real,
                "slots": slots,
                "real_tokens_per_s": real / seconds,
                "padding": 1 - real / slots,
                "analyzer_padding": predicted,
            }
        )
    base = results[0]["real_tokens_per_s"]
    for r in results:
        rows.append(
            [
                r["pipeline"],
                f"{r['seconds']:.2f}",
                r["batches"],
                fmt_rate(r["real_tokens_per_s"]),
                f"{r['real_tokens_per_s'] / base:.2f}x",
                f"{r['padding']:.2%}",
                "-" if r["analyzer_padding"] is None else f"{r['analyzer_padding']:.2%}",
            ]
        )
    print_table(
        f"MaxText input pipelines: {args.docs:,} documents, {int(lengths.sum()):,} tokens, ctx {CTX}, "
        f"{PER_HOST} rows per host, one epoch, median of {args.runs}",
        [
            "pipeline",
            "seconds",
            "batches",
            "real tokens/s",
            "vs padding",
            "padding",
            "analyze-padding --maxtext-config",
        ],
        rows,
    )
    path = write_json(
        "maxtext_input",
        {
            "docs": args.docs,
            "tokens": int(lengths.sum()),
            "ctx": CTX,
            "per_host_batch": PER_HOST,
            "runs": args.runs,
            "results": results,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
