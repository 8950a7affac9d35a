"""Explain: what was in global batch N, from the schedule, against replaying the pipeline to step N.

A synthetic lengths file of ``--documents`` documents (default 10^8; _common's distribution c: lognormal median 400,
mean ~800, at most 8,192 tokens; written as ``lengths.npy`` and memory-mapped), planned packing at ctx 8,192, a full
shuffle of the rows per epoch, ``--batch-size`` rows a global batch, unlimited epochs. Measured, one process:

* **cold start** (once per process, not in the step times): the plan of every document (what the pipeline computes
  at start too); it is what an :class:`~datatools.pipeline.explain.Explainer` caches, with each epoch's batch count
  (then ``gc.freeze()``: the interpreter's full collections skip what was built, as a long-lived service would);
* **a step explained**: ``Explainer.step(N)`` (the rows, pieces, hosts, devices, tokens and attention tiles of
  global batch N) for N drawn log-uniformly in [0, 10^6) plus 0, 41,213 and 999,999: median and p99 (ms);
* **the ledger**: per-document tokens and visits of every step of the first epoch (``counts``: the whole plan's
  counts computed once and kept, less the rows not delivered), then of steps ``[0, 10^6)`` (each whole epoch one
  pass over the documents), and the latter written to ``.npz``; **the inverse**: one document's sightings in the
  first epoch; documents per second;
* **replay** (what a user without ``explain`` does): the pipeline itself run from step 0 to N, its reads free (a
  source that returns zeros: a lower bound on a real replay, which also reads tokens). Measured over
  ``--replay-steps`` steps and extrapolated linearly to N (steps cost the same throughout an epoch), said so.

    python benchmarks/explain.py [--documents 100000000] [--batch-size 256] [--steps 200] [--replay-steps 300]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import announce, distribution, print_table, write_json

from datatools.io.sources.documents import DocumentSource  # noqa: E402
from datatools.pipeline import build_canonical, parse_config  # noqa: E402
from datatools.pipeline.explain import Explainer  # noqa: E402

TARGET_MS = 10.0  # a step explained, at most (issue 54)
TARGET_RATE = 1e7  # documents a second, the ledger and the inverse, at least
FAR = 10**6  # the steps explained lie in [0, FAR)


class FreeReads(DocumentSource):
    """Documents of given lengths whose reads cost nothing (zeros): replay's cheapest possible source."""

    in_memory = True

    def __init__(self, lengths: np.ndarray):
        self._lengths = lengths

    def __len__(self) -> int:
        return int(self._lengths.shape[0])

    def lengths(self) -> np.ndarray:
        return self._lengths

    def read_pieces(self, doc, start, length) -> np.ndarray:
        return np.zeros(int(np.sum(length)), np.int32)


def config(path: str, batch_size: int):
    return parse_config(
        {
            "source": {"path": path},
            "packing": {"ctx": 8192},
            "shuffle": {"kind": "full"},
            "batch_size": batch_size,
            "drop_remainder": True,
            "num_epochs": None,
            "format": "datatools",
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10**8)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200, help="steps explained (timed one by one)")
    parser.add_argument("--replay-steps", type=int, default=300, help="steps of the pipeline replayed (timed)")
    args = parser.parse_args()
    announce(
        args.steps,
        "times per step explained: median and p99 over the steps, wall and the process's CPU time (a shared "
        "machine's wall times include waits for a core); replay extrapolated",
    )
    lengths, _ = distribution("c", args.documents, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "lengths.npy", lengths)
        del lengths
        lengths = np.load(Path(tmp) / "lengths.npy", mmap_mode="r")
        docs = FreeReads(np.asarray(lengths, np.int64))
        cfg = config(str(Path(tmp) / "lengths.npy"), args.batch_size)

        t0 = time.perf_counter()
        e = Explainer(cfg, docs)
        cold_s = time.perf_counter() - t0
        gc.freeze()  # what is built stays: the collector's full passes skip it (a service holding an Explainer would)
        per_epoch = e.schedule.num_batches(0)
        rng = np.random.default_rng(1)
        steps = np.unique(np.concatenate([np.exp(rng.uniform(0, np.log(FAR), args.steps)).astype(np.int64) - 1]))
        steps = np.concatenate([[0, 41_213, FAR - 1], steps])
        t0 = time.perf_counter()
        e.step(FAR - 1)  # every epoch's batch count up to there, once
        first_far_s = time.perf_counter() - t0
        times, cpu = [], []
        for n in steps.tolist():
            t0, c0 = time.perf_counter(), time.process_time()
            report = e.step(n)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            assert report.step == n
        times_ms, cpu_ms = np.asarray(times) * 1e3, np.asarray(cpu) * 1e3
        median_ms, p99_ms = float(np.median(times_ms)), float(np.percentile(times_ms, 99))
        cpu_median_ms, cpu_p99_ms = float(np.median(cpu_ms)), float(np.percentile(cpu_ms, 99))

        t0, c0 = time.perf_counter(), time.process_time()
        tokens, visits = e.counts(per_epoch)
        counts_s, counts_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        del tokens, visits
        far_epochs = FAR / per_epoch
        t0, c0 = time.perf_counter(), time.process_time()
        tokens, visits = e.counts(FAR)
        far_s, far_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        del tokens, visits
        t0 = time.perf_counter()
        e.ledger(Path(tmp) / "ledger.npz", FAR)
        ledger_s = time.perf_counter() - t0
        ledger_bytes = (Path(tmp) / "ledger.npz").stat().st_size
        t0, c0 = time.perf_counter(), time.process_time()
        found = e.document(12_345, epochs=1)
        inverse_s, inverse_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        assert found.sightings
        documents = e.lengths.shape[0]
        del e
        gc.collect()

        t0 = time.perf_counter()
        built = build_canonical(cfg, docs)
        replay_cold_s = time.perf_counter() - t0
        it = iter(built.dataset)
        next(it)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.replay_steps):
            next(it)
        replay_step_s = (time.perf_counter() - t0) / args.replay_steps
        replay_cpu_s = (time.process_time() - c0) / args.replay_steps

    rows = [
        ["cold start: plan + epochs (cached)", f"{cold_s:.1f} s", f"{replay_cold_s:.1f} s (the same plan)"],
        ["first step near 10^6 (epoch counts)", f"{first_far_s * 1e3:.1f} ms", "-"],
        [
            f"a step, N in [0, 10^6): median / p99 ({len(steps)} steps), wall",
            f"{median_ms:.2f} / {p99_ms:.2f} ms",
            f"{replay_step_s * 1e3:.2f} ms a step replayed",
        ],
        [
            "the same, CPU time of the process",
            f"{cpu_median_ms:.2f} / {cpu_p99_ms:.2f} ms",
            f"{replay_cpu_s * 1e3:.2f} ms a step replayed",
        ],
        ["step 41,213", "same", f"{41_213 * replay_step_s:,.0f} s replayed (extrapolated)"],
        ["step 999,999", "same", f"{(FAR - 1) * replay_step_s / 3600:,.1f} h replayed (extrapolated)"],
        [
            f"ledger: first epoch ({per_epoch:,} steps; the plan's counts kept)",
            f"{documents / counts_s / 1e6:,.1f}M documents/s ({counts_s:.1f} s; CPU {counts_cpu_s:.1f} s)",
            f"{per_epoch * replay_step_s:,.0f} s replayed",
        ],
        [
            f"ledger: steps [0, 10^6) ({far_epochs:.1f} epochs)",
            f"{documents * far_epochs / far_s / 1e6:,.1f}M documents/s ({far_s:.1f} s; CPU {far_cpu_s:.1f} s)",
            f"{FAR * replay_step_s / 3600:,.1f} h replayed",
        ],
        ["ledger to 10^6 written (.npz)", f"{ledger_s:.1f} s ({ledger_bytes / 1e6:,.0f} MB)", ""],
        [
            "inverse: one document, first epoch",
            f"{documents / inverse_s / 1e6:,.1f}M documents/s (CPU {inverse_cpu_s:.1f} s)",
            "",
        ],
    ]
    print_table(
        f"explain against replay: {documents:,} documents, ctx 8,192, batch {args.batch_size} "
        f"({per_epoch:,} steps an epoch); replay: the pipeline with free reads, {args.replay_steps} steps timed",
        ["measure", "explain", "replay to step N"],
        rows,
    )
    print(
        f"targets: a step <= {TARGET_MS:g} ms: {'met' if p99_ms <= TARGET_MS else 'NOT met'} (p99 wall), "
        f"{'met' if cpu_p99_ms <= TARGET_MS else 'NOT met'} (p99 CPU); ledger and "
        f"inverse >= {TARGET_RATE / 1e6:g}M documents/s: "
        f"{'met' if min(documents / counts_s, documents / inverse_s) >= TARGET_RATE else 'NOT met'} (wall), "
        f"{'met' if min(documents / counts_cpu_s, documents / inverse_cpu_s) >= TARGET_RATE else 'NOT met'} (CPU)"
    )
    write_json(
        "explain",
        {
            "documents": documents,
            "ctx": 8192,
            "batch_size": args.batch_size,
            "steps_per_epoch": per_epoch,
            "schedule": "planned packing (best fit decreasing), full shuffle of rows",
            "cold_start_s": cold_s,
            "cached": "the plan of every document and each epoch's batch count (the pipeline computes the same)",
            "first_far_step_ms": first_far_s * 1e3,
            "steps_explained": len(steps),
            "step_ms_median": median_ms,
            "step_ms_p99": p99_ms,
            "step_ms_max": float(times_ms.max()),
            "step_cpu_ms_median": cpu_median_ms,
            "step_cpu_ms_p99": cpu_p99_ms,
            "ledger_counts_cpu_s": counts_cpu_s,
            "inverse_cpu_s": inverse_cpu_s,
            "replay_step_cpu_ms": replay_cpu_s * 1e3,
            "ledger_counts_s": counts_s,
            "ledger_documents_per_s": documents / counts_s,
            "ledger_far_epochs": far_epochs,
            "ledger_far_s": far_s,
            "ledger_far_cpu_s": far_cpu_s,
            "ledger_far_documents_per_s": documents * far_epochs / far_s,
            "ledger_far_write_s": ledger_s,
            "ledger_bytes": ledger_bytes,
            "inverse_s": inverse_s,
            "inverse_documents_per_s": documents / inverse_s,
            "replay": "the pipeline from step 0 with free reads (zeros), timed over replay_steps, extrapolated to N",
            "replay_cold_s": replay_cold_s,
            "replay_steps": args.replay_steps,
            "replay_step_ms": replay_step_s * 1e3,
            "replay_to_41213_s": 41_213 * replay_step_s,
            "replay_to_999999_s": (FAR - 1) * replay_step_s,
        },
    )


if __name__ == "__main__":
    main()
