"""The padding analysis of an input on disk: what ``datatools analyze-padding PATH`` runs, as one function."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

import numpy as np
import numpy.typing as npt
from rich.console import Console

from datatools.analysis.curriculum import curriculum_savings
from datatools.analysis.device_balance import device_balance
from datatools.analysis.loss_distortion import DEFAULT_BATCH_SIZE, loss_distortion
from datatools.analysis.maxtext_simulation import (
    MaxTextReport,
    MaxTextSettings,
    maxtext_inputs,
    maxtext_report,
    read_maxtext_config,
)
from datatools.analysis.padding import STRATEGIES, PaddingOptions, analyze
from datatools.analysis.padding_result import PaddingReport
from datatools.base.checks import MAX_WINDOW
from datatools.base.numba_cache import kernels_cold
from datatools.base.progress import count_progress, doing
from datatools.io.formats.token_input import TokenInput
from datatools.io.sources.inputs import InputOptions, lengths_in_place, open_input
from datatools.io.sources.lengths_progress import read_lengths_shown
from datatools.io.storage.paths import display
from datatools.kernels import bucket
from datatools.kernels.packing import counting, pieces


def _counted(console: Console | None, total: int, what: str) -> AbstractContextManager[Callable[..., object]]:
    """:func:`count_progress` on ``console``; None: shows nothing."""
    return nullcontext(lambda n=1: None) if console is None else count_progress(console, total, what)


@dataclasses.dataclass(frozen=True)
class AnalysisOptions:
    """What ``datatools analyze-padding`` is asked besides the input (the command makes one of its options).

    Args:
      contexts: ctx values (tokens); empty: the defaults. A MaxText config's ``max_target_length`` is added.
      tile, buckets, max_segments, window: as :class:`~datatools.analysis.padding.PaddingOptions`; ``window`` None:
        256, or MaxText's per-host batch.
      maxtext_config, maxtext_set: a MaxText YAML config and ``KEY=VALUE`` overrides: also what it wastes today.
      loss_batch_size: rows per batch of the loss-weight distortion view; None: 32.
      curriculum, tokens_per_batch: a length curriculum (tokens) and slots a batch (None: 8 rows of the longest).
      devices, global_batch: device counts a global batch of ``global_batch`` rows is split over: the busiest
        device's attention work over the mean at the recommended ctx, drawn and balanced (empty: not counted).
    """

    contexts: Sequence[int] = ()
    tile: int = 128
    buckets: int = 4
    max_segments: int | None = None
    window: int | None = None
    maxtext_config: str | os.PathLike[str] | None = None
    maxtext_set: Sequence[str] = ()
    loss_batch_size: int | None = None
    curriculum: Sequence[int] = ()
    tokens_per_batch: int | None = None
    devices: Sequence[int] = ()
    global_batch: int = 128


def _maxtext_specials(
    inp: TokenInput, path: str | os.PathLike[str], settings: MaxTextSettings, reading: InputOptions
) -> tuple[TokenInput, int]:
    """``(input, added)``: a text input read with the BOS / EOS that MaxText's tokenizer puts around every text
    (its ``add_bos`` / ``add_eos``, when it tokenizes: ``tokenize_train_data``), so that the analysis, and the config
    ``--write-config`` writes from it, count and deliver the tokens MaxText makes; ``added``: tokens each text gains.
    A ``--bos`` / ``--eos`` given is kept as given; a tokenizer without such a token adds none."""
    if not settings.tokenize_train_data or reading.bos or reading.eos:
        return inp, 0
    bos = settings.add_bos and _opens(path, dataclasses.replace(reading, bos="auto"))
    eos = settings.add_eos and _opens(path, dataclasses.replace(reading, eos="auto"))
    if not (bos or eos):
        return inp, 0
    both = dataclasses.replace(reading, bos="auto" if bos else reading.bos, eos="auto" if eos else reading.eos)
    return open_input(path, both), int(bos) + int(eos)


def _opens(path: str | os.PathLike[str], reading: InputOptions) -> bool:
    """Whether the input opens with ``reading``: False when the tokenizer has no usual BOS / EOS token to add."""
    try:
        open_input(path, reading)
    except ValueError:
        return False
    return True


def _settings(options: AnalysisOptions) -> tuple[MaxTextSettings | None, PaddingOptions]:
    """The MaxText config's settings (None without one) and the analyzer's options: its ``max_target_length`` joins
    the contexts, and its per-host batch is the window when none is given (else Grain's num_packing_bins, 256)."""
    settings = None
    contexts, window = tuple(options.contexts), options.window
    if options.maxtext_config is not None or options.maxtext_set:
        settings = read_maxtext_config(options.maxtext_config, list(options.maxtext_set))
        if window is None:
            window = min(settings.per_host_batch, MAX_WINDOW)
        contexts = tuple(sorted(set(contexts) | {settings.max_target_length}))
    window = PaddingOptions.window if window is None else window  # Grain's num_packing_bins without a MaxText config
    padding = PaddingOptions(contexts or None, options.tile, options.buckets, options.max_segments, window)
    return settings, padding


def _named_input(options: AnalysisOptions, reading: InputOptions) -> tuple[str, InputOptions]:
    """``(path, reading)`` of the data the MaxText config names (no PATH given): its files, and its feature and
    tokenizer where ``reading`` names none (a text feature takes the config's tokenizer; token ids take none)."""
    if options.maxtext_config is None:
        raise ValueError("no input: name the data as PATH, or give --maxtext-config with grain_train_files")
    named = maxtext_inputs(options.maxtext_config, list(options.maxtext_set))
    path = named.files
    if reading.column is None and named.column is not None:
        reading = dataclasses.replace(reading, column=named.column)
    if reading.tokenizer is None and named.tokenizer is not None:
        try:
            open_input(path, InputOptions(column=reading.column))
        except ValueError as exc:
            if "holds text" not in str(exc):
                raise
            reading = dataclasses.replace(reading, tokenizer=named.tokenizer)
    return path, reading


def _lengths(inp: TokenInput, path: str | os.PathLike[str], console: Console | None) -> npt.NDArray[np.integer]:
    """Tokens per document of ``inp``: ``lengths.npy`` alone memory-mapped, read a slice at a time (10^9 not
    copied), else read with a progress bar on ``console``. No document: ValueError naming ``path``."""
    lengths = lengths_in_place(inp)
    if lengths is None:
        lengths = read_lengths_shown(inp, console)
    if lengths.size == 0:
        raise ValueError(f"{display(path)}: no documents found")
    return lengths


def _simulated(lengths: npt.NDArray[np.integer], padding: PaddingOptions, console: Console | None) -> PaddingReport:
    """Every strategy at every context (:func:`~datatools.analysis.padding.analyze`), counted on ``console``."""
    jobs = (len(padding.contexts) if padding.contexts else 4) * len(STRATEGIES)
    what = "simulating strategies"
    if kernels_cold([counting, pieces, bucket]):  # numba compiles first, the bar still at 0
        what += " (compiling kernels: first run only, ~30 s of CPU; datatools warm compiles them ahead)"
    with _counted(console, jobs, what) as advance:
        return analyze(lengths, padding, progress=advance)


def _maxtext_view(
    lengths: npt.NDArray[np.integer], settings: MaxTextSettings, report: PaddingReport, options: AnalysisOptions
) -> MaxTextReport:
    """What MaxText's own pipeline wastes on ``lengths`` (as its tokenizer makes them: it adds its BOS / EOS
    itself), beside the recommendation of ``report``."""
    doing(f"simulating MaxText's own pipeline on {lengths.size:,} documents")
    rec = report.recommendation
    return maxtext_report(
        lengths,
        settings,
        datatools_cap=rec.max_segments,
        datatools_efficiency=rec.efficiency,
        config=display(options.maxtext_config) if options.maxtext_config else "defaults",
    )


def _views(
    lengths: npt.NDArray[np.integer], report: PaddingReport, options: AnalysisOptions, console: Console | None
) -> PaddingReport:
    """``report`` with the views at its recommended ctx: the loss-weight distortion, the curriculum's savings and
    the attention work per device (the last two when asked)."""
    ctx = report.recommendation.ctx
    with _counted(console, 1, "loss weight distortion") as advance:
        distortion = loss_distortion(lengths, ctx, batch_size=options.loss_batch_size or DEFAULT_BATCH_SIZE)
        advance(1)
    savings = None
    if options.curriculum:
        lengths_k = sorted(int(n) for n in options.curriculum)
        tokens = options.tokens_per_batch or 8 * lengths_k[-1]
        savings = curriculum_savings(lengths, lengths_k, tokens, block=options.tile)
    balance = None
    if options.devices:
        with _counted(console, 1, "attention work per device") as advance:
            block = options.tile if ctx % options.tile == 0 else 1
            balance = device_balance(
                lengths, ctx, batch_size=options.global_batch, devices=options.devices, block=block
            )
            advance(1)
    return dataclasses.replace(report, curriculum=savings, devices=balance, loss_distortion=distortion)


def analyze_input(
    path: str | os.PathLike[str] | None,
    options: AnalysisOptions | None = None,
    reading: InputOptions | None = None,
    *,
    console: Console | None = None,
) -> PaddingReport:
    """The padding analysis of the input at ``path`` (read by :func:`~datatools.io.sources.inputs.open_input` with
    ``reading``; None: the files, feature and tokenizer ``options.maxtext_config`` names), as ``options`` asks
    (:class:`AnalysisOptions`; None: the defaults). ``console``: a rich console for progress; None shows nothing.

    Raises:
      ValueError: the input holds no document, or a bad option or MaxText key (naming it).
    """
    t0 = time.perf_counter()
    options = AnalysisOptions() if options is None else options
    reading = InputOptions() if reading is None else reading
    doing("reading the MaxText config" if options.maxtext_config else "opening the input")
    settings, padding = _settings(options)
    if path is None:  # the files, feature and tokenizer the MaxText config names
        path, reading = _named_input(options, reading)
    inp = open_input(path, reading)
    added = 0  # tokens a text gets here only because the MaxText config's tokenizer adds them (BOS, EOS)
    if settings is not None and inp.encoder is not None:  # a text input
        inp, added = _maxtext_specials(inp, path, settings, reading)
    lengths = _lengths(inp, path, console)
    read_s = time.perf_counter() - t0
    report = _simulated(lengths, padding, console)
    maxtext = (
        None if settings is None else _maxtext_view(lengths - added if added else lengths, settings, report, options)
    )
    return dataclasses.replace(
        _views(lengths, report, options, console),
        maxtext=maxtext,
        source=display(path),
        input=inp.describe(),
        read_seconds=read_s,
        input_bytes=inp.nbytes,
        analyze_seconds=time.perf_counter() - t0 - read_s,
    )
