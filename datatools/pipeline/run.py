"""Run a built pipeline for N batches and measure it: batches/s, tokens/s, efficiency, shapes."""

from __future__ import annotations

import time
from contextlib import nullcontext

import numpy as np

from datatools.kernels.batch_layouts import to_format
from datatools.pipeline import PipelineConfig, build_canonical


def run_pipeline(cfg: PipelineConfig, steps: int, *, progress=None, documents=None) -> dict:
    """Iterate ``steps`` batches (fewer when the data ends) in the config's format and measure them.

    Rates are over the batches after the first (the first includes starting workers).

    Returns:
      A dict: ``batches``, ``batches_per_s``, ``tokens_per_s`` (slots: real + padding),
      ``real_tokens_per_s``, ``efficiency`` (real / slots over the batches seen),
      ``plan_efficiency`` (planned packing: over the whole plan), ``shapes`` (distinct
      [rows, tokens] shapes), ``startup_s``, ``documents``, ``format``.
    """
    t0 = time.perf_counter()
    built = build_canonical(cfg, documents)
    build_s = time.perf_counter() - t0
    it = iter(built.dataset)
    real = slots = done = 0
    shapes: set[tuple[int, int]] = set()
    first_at = None
    bar = progress(steps) if progress else nullcontext(lambda: None)
    try:
        with bar as advance:
            for _ in range(steps):
                try:
                    batch = next(it)
                except StopIteration:
                    break
                seg = batch["segment_ids"]
                if first_at is None:
                    first_at = time.perf_counter()
                else:
                    real += int(np.count_nonzero(seg))
                    slots += seg.size
                shapes.add(tuple(int(x) for x in seg.shape))
                to_format(batch, cfg.format, boundary_targets=cfg.boundary_targets, positions=cfg.positions)  # the conversion the configured pipeline pays (timed, then dropped)
                done += 1
                if advance:
                    advance()
    finally:
        close = getattr(it, "close", None)
        if close:
            close()
    end = time.perf_counter()
    span = end - first_at if first_at is not None and done > 1 else float("nan")
    return {
        "config": {"source": cfg.source.path, "mode": "bucketing" if cfg.packing is None else cfg.packing.mode,
                   "workers": cfg.workers, "format": cfg.format, "batch_size": cfg.batch_size},
        "documents": built.documents,
        "batches": done,
        "build_s": build_s,
        "startup_s": (first_at - t0 - build_s) if first_at is not None else float("nan"),
        "batches_per_s": (done - 1) / span if done > 1 else 0.0,
        "tokens_per_s": slots / span if done > 1 else 0.0,
        "real_tokens_per_s": real / span if done > 1 else 0.0,
        "efficiency": real / slots if slots else 0.0,
        "plan_efficiency": built.plan_efficiency,
        "shapes": sorted([list(s) for s in shapes]),
        "format": cfg.format,
    }
