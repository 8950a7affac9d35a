"""Explain: what was in global batch N, from the schedule, against replaying the pipeline to step N.

A synthetic lengths file of ``--documents`` documents (default 10^8; _common's distribution c: lognormal median 400,
mean ~800, at most 8,192 tokens; written as ``lengths.npy`` and memory-mapped), planned packing at ctx 8,192, a full
shuffle of the rows per epoch, ``--batch-size`` rows a global batch, unlimited epochs. Measured, one process:

* **cold start** (once per process, not in the step times): the plan of every document (what the pipeline computes
  at start too); it is what an :class:`~datatools.pipeline.explain.Explainer` caches, with each epoch's batch count
  (then ``gc.freeze()``: the interpreter's full collections skip what was built, as a long-lived service would);
* **a step explained**: ``Explainer.step(N)`` (the rows, pieces, hosts, devices, tokens and attention tiles of
  global batch N) for N drawn log-uniformly in [0, 10^6) plus 0, 41,213 and 999,999: median and p99 (ms), wall and
  CPU time, asked back to back and asked one at a time (``--pause`` ms apart: a user or a service asking, the
  process idle between questions, so the scheduler runs it when asked instead of between its time slices);
* **the ledger**: per-document tokens and visits of every step of the first epoch (``counts``), asked twice: the
  first computes the whole plan's counts (kept) and allocates the counters, the second counts the epoch from
  them (the whole plan's counts less the rows not delivered); then of steps ``[0, 10^6)`` (each whole epoch one
  pass over the documents), and the latter written to a compact ``.npz``; **the inverse**: one document's
  sightings in the first epoch; documents per second;
* **the ledger of the other schedules** on ``--schedule-documents`` documents (default 10^7, the same
  distribution): streaming packing (window 1,024, full shuffle), lanes (a block shuffle read in lanes, the default
  for a block shuffle) and a length curriculum (1,024-8,192 tokens, 256 x 8,192 token slots a batch): the
  Explainer built (the schedule's epoch counted), then the ledger of the first epoch, asked twice, and of three
  epochs; documents per second, wall and CPU;
* **replay** (what a user without ``explain`` does): the pipeline itself run from step 0 to N, its reads free (a
  source that returns zeros: a lower bound on a real replay, which also reads tokens). Measured over
  ``--replay-steps`` steps and extrapolated linearly to N (steps cost the same throughout an epoch), said so.

    python benchmarks/explain.py [--documents 100000000] [--batch-size 256] [--steps 200] [--replay-steps 300]
        [--pause 20] [--schedule-documents 10000000]
"""

from __future__ import annotations

import argparse
import gc
import os
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


SCHEDULES = {  # the schedules whose ledger walks windows or plans of lengths (measured on --schedule-documents)
    "streaming": {"packing": {"ctx": 8192, "mode": "streaming", "window": 1024}, "shuffle": {"kind": "full"}},
    "lanes": {"packing": {"ctx": 8192, "mode": "streaming", "window": 1024}, "shuffle": {"kind": "block"}},
    "curriculum": {
        "curriculum": {"lengths": [1024, 2048, 4096, 8192], "tokens_per_batch": 256 * 8192},
        "shuffle": {"kind": "full"},
    },
}


def timed(fn, *args, **kwargs):
    """``(value, wall s, CPU s)`` of ``fn(*args, **kwargs)``."""
    t0, c0 = time.perf_counter(), time.process_time()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - t0, time.process_time() - c0


def schedule_ledgers(n: int) -> list[dict]:
    """The ledger's rate for streaming packing, lanes and the curriculum on ``n`` documents (see the docstring)."""
    lengths, _ = distribution("c", n, seed=0)
    docs = FreeReads(np.asarray(lengths, np.int64))
    out = []
    for name, section in SCHEDULES.items():
        cfg = parse_config(
            {
                "source": {"path": "lengths.npy"},
                "batch_size": 256,
                "drop_remainder": True,
                "num_epochs": None,
                "format": "datatools",
                **section,
            }
        )
        e, build_s, build_cpu = timed(Explainer, cfg, docs)
        per_epoch, count_s, count_cpu = timed(e.schedule.num_batches, 0)
        (tokens, _), first_s, first_cpu = timed(e.counts, per_epoch)
        _, again_s, again_cpu = timed(e.counts, per_epoch)
        three = sum(e.schedule.num_batches(k) for k in range(3))
        _, three_s, three_cpu = timed(e.counts, three)
        found, inverse_s, inverse_cpu = timed(e.document, 12_345, epochs=1)
        assert found.sightings
        out.append(
            {
                "schedule": name,
                "kind": type(e.schedule).__name__,
                "documents": n,
                "steps_per_epoch": per_epoch,
                "tokens_first_epoch": int(tokens.sum()),
                "build_s": build_s + count_s,
                "build_cpu_s": build_cpu + count_cpu,
                "first_epoch_s": first_s,
                "first_epoch_cpu_s": first_cpu,
                "epoch_again_s": again_s,
                "epoch_again_cpu_s": again_cpu,
                "three_epochs_s": three_s,
                "three_epochs_cpu_s": three_cpu,
                "documents_per_s": n / first_s,
                "documents_per_cpu_s": n / first_cpu,
                "three_epochs_documents_per_s": 3 * n / three_s,
                "three_epochs_documents_per_cpu_s": 3 * n / three_cpu,
                "inverse_s": inverse_s,
                "inverse_cpu_s": inverse_cpu,
                "inverse_documents_per_s": n / inverse_s,
                "inverse_documents_per_cpu_s": n / inverse_cpu,
            }
        )
        del e, tokens
        gc.collect()
    return out


def print_schedules(others: list[dict]) -> None:
    print_table(
        f"the ledger and the inverse of the schedules that walk windows or plans: {others[0]['documents']:,} "
        "documents, ctx 8,192, 256 rows a batch",
        ["schedule", "built (epoch counted)", "ledger, first epoch", "asked again", "three epochs", "inverse"],
        [
            [
                f"{o['schedule']} ({o['steps_per_epoch']:,} steps an epoch)",
                f"{o['build_s']:.1f} s (CPU {o['build_cpu_s']:.1f} s)",
                f"{o['documents_per_s'] / 1e6:.1f}M/s (CPU {o['documents_per_cpu_s'] / 1e6:.1f}M/s)",
                f"{o['documents'] / o['epoch_again_s'] / 1e6:.1f}M/s "
                f"(CPU {o['documents'] / o['epoch_again_cpu_s'] / 1e6:.1f}M/s)",
                f"{o['three_epochs_documents_per_s'] / 1e6:.1f}M/s "
                f"(CPU {o['three_epochs_documents_per_cpu_s'] / 1e6:.1f}M/s)",
                f"{o['inverse_documents_per_s'] / 1e6:.1f}M/s (CPU {o['inverse_documents_per_cpu_s'] / 1e6:.1f}M/s)",
            ]
            for o in others
        ],
    )


def step_times(e: Explainer, steps: np.ndarray, pause_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(wall ms, CPU ms) of each step explained, ``pause_s`` asleep before each (0: back to back)."""
    times, cpu = [], []
    for n in steps.tolist():
        if pause_s:
            time.sleep(pause_s)
        t0, c0 = time.perf_counter(), time.process_time()
        report = e.step(n)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        assert report.step == n
    return np.asarray(times) * 1e3, np.asarray(cpu) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10**8)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200, help="steps explained (timed one by one)")
    parser.add_argument("--replay-steps", type=int, default=300, help="steps of the pipeline replayed (timed)")
    parser.add_argument("--pause", type=float, default=20.0, help="ms asleep before each step asked one at a time")
    parser.add_argument("--schedule-documents", type=int, default=10**7, help="documents of the other schedules")
    parser.add_argument(
        "--schedules-only",
        action="store_true",
        help="only the other schedules' ledger and inverse (written to results/explain_schedules.json)",
    )
    args = parser.parse_args()
    if args.schedules_only:
        announce(1, "one run a measure; wall and the process's CPU time (a shared machine's wall includes waits)")
        others = schedule_ledgers(args.schedule_documents)
        print_schedules(others)
        write_json("explain_schedules", {"schedules": others})
        return
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
        times_ms, cpu_ms = step_times(e, steps, 0.0)
        median_ms, p99_ms = float(np.median(times_ms)), float(np.percentile(times_ms, 99))
        cpu_median_ms, cpu_p99_ms = float(np.median(cpu_ms)), float(np.percentile(cpu_ms, 99))
        load_asked = os.getloadavg()[0]
        asked_ms, asked_cpu_ms = step_times(e, steps, args.pause / 1e3)
        asked_median_ms, asked_p99_ms = float(np.median(asked_ms)), float(np.percentile(asked_ms, 99))
        asked_cpu_median_ms, asked_cpu_p99_ms = float(np.median(asked_cpu_ms)), float(np.percentile(asked_cpu_ms, 99))

        _, cold_counts_s, cold_counts_cpu_s = timed(e.counts, per_epoch)  # the whole plan's counts kept
        _, counts_s, counts_cpu_s = timed(e.counts, per_epoch)
        far_epochs = FAR / per_epoch
        t0, c0 = time.perf_counter(), time.process_time()
        tokens, visits = e.counts(FAR)
        far_s, far_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        del tokens, visits
        _, ledger_s, ledger_cpu_s = timed(e.ledger, Path(tmp) / "ledger.npz", FAR)
        ledger_bytes = (Path(tmp) / "ledger.npz").stat().st_size
        with np.load(Path(tmp) / "ledger.npz") as f:
            partial = int(f["partial"].shape[0])
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
        del built, it
        gc.collect()
    others = schedule_ledgers(args.schedule_documents)

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
        [
            f"the same steps asked one at a time ({args.pause:g} ms apart), wall",
            f"{asked_median_ms:.2f} / {asked_p99_ms:.2f} ms",
            f"load {load_asked:.1f}",
        ],
        ["the same, CPU time", f"{asked_cpu_median_ms:.2f} / {asked_cpu_p99_ms:.2f} ms", ""],
        ["step 41,213", "same", f"{41_213 * replay_step_s:,.0f} s replayed (extrapolated)"],
        ["step 999,999", "same", f"{(FAR - 1) * replay_step_s / 3600:,.1f} h replayed (extrapolated)"],
        [
            f"ledger: first epoch ({per_epoch:,} steps), first asked: the whole plan's counts computed",
            f"{documents / cold_counts_s / 1e6:,.1f}M documents/s "
            f"({cold_counts_s:.1f} s; CPU {cold_counts_cpu_s:.1f} s)",
            f"{per_epoch * replay_step_s:,.0f} s replayed",
        ],
        [
            "ledger: first epoch asked again (the plan's counts kept)",
            f"{documents / counts_s / 1e6:,.1f}M documents/s ({counts_s:.1f} s; CPU {counts_cpu_s:.1f} s)",
            "",
        ],
        [
            f"ledger: steps [0, 10^6) ({far_epochs:.1f} epochs)",
            f"{documents * far_epochs / far_s / 1e6:,.1f}M documents/s ({far_s:.1f} s; CPU {far_cpu_s:.1f} s)",
            f"{FAR * replay_step_s / 3600:,.1f} h replayed",
        ],
        [
            "ledger to 10^6 counted and written (compact .npz)",
            f"{ledger_s:.1f} s, CPU {ledger_cpu_s:.1f} s ({ledger_bytes / 1e6:,.1f} MB; {partial:,} partial)",
            "",
        ],
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
    print_schedules(others)
    walls = [documents / cold_counts_s, documents / counts_s, documents / inverse_s]
    walls += [o["documents_per_s"] for o in others]
    cpus = [documents / cold_counts_cpu_s, documents / counts_cpu_s, documents / inverse_cpu_s]
    cpus += [o["documents_per_cpu_s"] for o in others]

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print(
        f"targets: a step <= {TARGET_MS:g} ms (p99): back to back {met(p99_ms <= TARGET_MS)} (wall), "
        f"{met(cpu_p99_ms <= TARGET_MS)} (CPU); asked one at a time {met(asked_p99_ms <= TARGET_MS)} (wall); "
        f"ledger (every schedule, first epoch) and inverse >= {TARGET_RATE / 1e6:g}M documents/s: "
        f"{met(min(walls) >= TARGET_RATE)} (wall, slowest {min(walls) / 1e6:.1f}M), "
        f"{met(min(cpus) >= TARGET_RATE)} (CPU, slowest {min(cpus) / 1e6:.1f}M)"
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
            "pause_ms": args.pause,
            "load_asked": load_asked,
            "asked_step_ms_median": asked_median_ms,
            "asked_step_ms_p99": asked_p99_ms,
            "asked_step_cpu_ms_median": asked_cpu_median_ms,
            "asked_step_cpu_ms_p99": asked_cpu_p99_ms,
            "ledger_cold_counts_s": cold_counts_s,
            "ledger_cold_counts_cpu_s": cold_counts_cpu_s,
            "ledger_far_write_cpu_s": ledger_cpu_s,
            "ledger_partial_documents": partial,
            "schedules": others,
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
