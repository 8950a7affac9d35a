"""The padding analysis of an input on disk: what ``datatools analyze-padding PATH`` runs, as one function."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from rich.console import Console

from datatools.analysis.curriculum import curriculum_savings
from datatools.analysis.device_balance import device_balance
from datatools.analysis.loss_distortion import DEFAULT_BATCH_SIZE, loss_distortion
from datatools.analysis.maxtext_simulation import MaxTextSettings, maxtext_inputs, maxtext_report, read_maxtext_config
from datatools.analysis.padding import STRATEGIES, PaddingOptions, analyze
from datatools.analysis.padding_result import PaddingReport
from datatools.base.checks import MAX_WINDOW
from datatools.base.numba_cache import kernels_cold
from datatools.base.progress import count_progress, doing
from datatools.io.formats.token_input import TokenInput
from datatools.io.sources.inputs import lengths_in_place, open_input
from datatools.io.sources.lengths_progress import read_lengths_shown
from datatools.io.storage.paths import display
from datatools.kernels import bucket
from datatools.kernels.packing import counting, pieces


def _counted(console: Console | None, total: int, what: str) -> AbstractContextManager[Callable[..., object]]:
    """:func:`count_progress` on ``console``; None: shows nothing."""
    return nullcontext(lambda n=1: None) if console is None else count_progress(console, total, what)


def _maxtext_specials(
    inp: TokenInput, path: str | os.PathLike[str], settings: MaxTextSettings, input_options: dict[str, Any]
) -> tuple[TokenInput, int]:
    """``(input, added)``: a text input read with the BOS / EOS that MaxText's tokenizer puts around every text
    (its ``add_bos`` / ``add_eos``, when it tokenizes: ``tokenize_train_data``), so that the analysis, and the config
    ``--write-config`` writes from it, count and deliver the tokens MaxText makes; ``added``: tokens each text gains.
    A ``--bos`` / ``--eos`` given is kept as given; a tokenizer without such a token adds none."""
    if not settings.tokenize_train_data or input_options.get("bos") or input_options.get("eos"):
        return inp, 0
    specials: dict[str, str] = {}
    for which, wanted in (("bos", settings.add_bos), ("eos", settings.add_eos)):
        if wanted:
            try:
                open_input(path, **{**input_options, which: "auto"})
            except ValueError:  # the tokenizer has no usual BOS / EOS token
                continue
            specials[which] = "auto"
    if not specials:
        return inp, 0
    return open_input(path, **{**input_options, **specials}), len(specials)


def analyze_input(
    path: str | os.PathLike[str] | None,
    *,
    contexts: Sequence[int] = (),
    tile: int = 128,
    buckets: int = 4,
    max_segments: int | None = None,
    window: int | None = None,
    maxtext_config: str | None = None,
    maxtext_set: Sequence[str] = (),
    console: Console | None = None,
    loss_batch_size: int | None = None,
    curriculum: Sequence[int] = (),
    tokens_per_batch: int | None = None,
    devices: Sequence[int] = (),
    global_batch: int = 128,
    **input_options: Any,
) -> PaddingReport:
    """The padding analysis of the input at ``path`` (read by :func:`~datatools.io.sources.inputs.open_input` with
    ``input_options``; None: the files, feature and tokenizer ``maxtext_config`` names).

    Args:
      contexts: ctx values (tokens); empty: the defaults. A MaxText config's ``max_target_length`` is added.
      tile, buckets, max_segments, window: as :class:`~datatools.analysis.padding.PaddingOptions`; ``window`` None:
        256, or MaxText's per-host batch.
      maxtext_config, maxtext_set: a MaxText YAML config and ``KEY=VALUE`` overrides: also what it wastes today.
      console: a rich console for progress; None shows nothing.
      loss_batch_size: rows per batch of the loss-weight distortion view; None: 32.
      curriculum, tokens_per_batch: a length curriculum (tokens) and slots a batch (None: 8 rows of the longest).
      devices, global_batch: device counts a global batch of ``global_batch`` rows is split over: the busiest
        device's attention work over the mean at the recommended ctx, drawn and balanced (empty: not counted).

    Raises:
      ValueError: the input holds no document, or a bad option or MaxText key (naming it).
    """
    t0 = time.perf_counter()
    settings = None
    contexts = tuple(contexts)
    doing("reading the MaxText config" if maxtext_config else "opening the input")
    if maxtext_config is not None or maxtext_set:
        settings = read_maxtext_config(maxtext_config, list(maxtext_set))
        if window is None:
            window = min(settings.per_host_batch, MAX_WINDOW)
        contexts = tuple(sorted(set(contexts) | {settings.max_target_length}))
    window = PaddingOptions.window if window is None else window  # Grain's num_packing_bins without a MaxText config
    options = PaddingOptions(contexts or None, tile, buckets, max_segments, window)
    if path is None:  # the files, feature and tokenizer the MaxText config names
        if maxtext_config is None:
            raise ValueError("no input: name the data as PATH, or give --maxtext-config with grain_train_files")
        named = maxtext_inputs(maxtext_config, list(maxtext_set))
        path = named.files
        if input_options.get("column") is None and named.column is not None:
            input_options["column"] = named.column
        if input_options.get("tokenizer") is None and named.tokenizer is not None:
            try:  # a text feature takes the config's tokenizer; token ids take none
                open_input(path, column=input_options.get("column"))
            except ValueError as exc:
                if "holds text" not in str(exc):
                    raise
                input_options["tokenizer"] = named.tokenizer
    inp = open_input(path, **input_options)
    added = 0  # tokens a text gets here only because the MaxText config's tokenizer adds them (BOS, EOS)
    if settings is not None and inp.is_text:
        inp, added = _maxtext_specials(inp, path, settings, input_options)
    lengths = lengths_in_place(inp)  # lengths.npy alone: memory-mapped, read a slice at a time (10^9 not copied)
    if lengths is None:
        lengths = read_lengths_shown(inp, console)
    if lengths.size == 0:
        raise ValueError(f"{display(path)}: no documents found")
    read_s = time.perf_counter() - t0
    jobs = (len(options.contexts) if options.contexts else 4) * len(STRATEGIES)
    what = "simulating strategies"
    if kernels_cold([counting, pieces, bucket]):  # numba compiles first, the bar still at 0
        what += " (compiling kernels: first run only, ~30 s)"
    with _counted(console, jobs, what) as advance:
        report = analyze(lengths, options, progress=advance)
    maxtext = None
    if settings is not None:
        doing(f"simulating MaxText's own pipeline on {lengths.size:,} documents")
        rec = report.recommendation
        maxtext = maxtext_report(  # the texts as MaxText tokenizes them: it adds its BOS / EOS itself
            lengths - added if added else lengths,
            settings,
            datatools_cap=rec.max_segments,
            datatools_efficiency=rec.efficiency,
            config=display(maxtext_config) if maxtext_config else "defaults",
        )
    with _counted(console, 1, "loss weight distortion") as advance:
        distortion = loss_distortion(
            lengths, report.recommendation.ctx, batch_size=loss_batch_size or DEFAULT_BATCH_SIZE
        )
        advance(1)
    savings = None
    if curriculum:
        lengths_k = sorted(int(n) for n in curriculum)
        savings = curriculum_savings(lengths, lengths_k, tokens_per_batch or 8 * lengths_k[-1], block=tile)
    balance = None
    if devices:
        with _counted(console, 1, "attention work per device") as advance:
            ctx = report.recommendation.ctx
            block = tile if ctx % tile == 0 else 1
            balance = device_balance(lengths, ctx, batch_size=global_batch, devices=devices, block=block)
            advance(1)
    return dataclasses.replace(
        report,
        curriculum=savings,
        devices=balance,
        maxtext=maxtext,
        source=display(path),
        input=inp.describe(),
        loss_distortion=distortion,
        read_seconds=read_s,
        input_bytes=inp.nbytes,
        analyze_seconds=time.perf_counter() - t0 - read_s,
    )
