"""Plan any input into an index-only packed plan on disk (``datatools pack DATA OUT`` as one function).

DATA is any input :func:`~datatools.io.sources.inputs.open_input` reads, a directory holding ``lengths.npy`` alone, or a
plan directory (re-packed from its lengths, no token read).
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datatools.base.progress import count_progress
from datatools.base.reports import Report
from datatools.io.storage.paths import display

if TYPE_CHECKING:  # kernels.packing loads numba: imported when a plan is written
    from rich.console import Console

    from datatools.io.sources.inputs import InputOptions
    from datatools.kernels.packing import PackOptions


@dataclass(frozen=True)
class PackReport(Report):
    """A packed plan written (the plan header's figures, tokens and rows) and how long it took (seconds)."""

    ctx: int
    algorithm: str
    max_segments: int | None
    align: int
    overflow: str
    group_docs: int
    num_rows: int
    num_pieces: int
    kept_tokens: int
    dropped_tokens: int
    empty_documents: int
    lower_bound_rows: int  # max(L1, L2): no packing needs fewer rows
    efficiency: float  # kept tokens / (rows * ctx)
    dtypes: dict[str, str]  # plan array -> dtype
    data: dict[str, Any]  # the documents' identity: documents, tokens, lengths_crc32
    source: str  # the input, as displayed
    plan: str  # the plan directory written, as displayed
    input_kind: str  # "plan", "lengths" or the input's kind (store, jsonl, parquet, ...)
    read_seconds: float
    pack_seconds: float

    @property
    def over_lower_bound(self) -> float:
        """Rows above the lower bound, as a fraction of it (0 when the bound is 0)."""
        return self.num_rows / self.lower_bound_rows - 1 if self.lower_bound_rows else 0.0


def plan_lengths(
    data: str | os.PathLike[str], console: Console | None = None, input_options: InputOptions | None = None
) -> tuple[np.ndarray, str]:
    """(tokens per document, what they are): memory-mapped from a plan or a lengths-only directory, else read
    from the input (``input_options`` as :func:`~datatools.io.sources.inputs.open_input`; progress on ``console``)."""
    from datatools.io.formats.numpy_files import lengths_only, lengths_only_file
    from datatools.io.formats.plan_file import PlanFile, is_plan

    if is_plan(data):
        return PlanFile(data).lengths(), "plan"
    if lengths_only_file(Path(data)) is not None:
        return lengths_only(Path(data)), "lengths"
    from datatools.io.sources.inputs import open_input
    from datatools.io.sources.lengths_progress import read_lengths_shown

    inp = open_input(data, input_options)
    return read_lengths_shown(inp, console), inp.kind


def pack_plan(
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    options: PackOptions,
    *,
    group_docs: int | None = None,
    overwrite: bool = False,
    console: Console | None = None,
    input_options: InputOptions | None = None,
) -> PackReport:
    """Plan the documents of ``data`` into the plan directory ``out`` (packed with ``options``: rows of
    ``options.ctx`` tokens, index only); the report is the plan's header, where the lengths came from and the
    times. Options as :func:`~datatools.io.formats.plan_file.write_plan` (``group_docs`` None: its default) and, for an
    input, :func:`~datatools.io.sources.inputs.open_input`; progress on ``console`` (None: none).

    Raises:
      ValueError: no documents, bad options, ``out`` exists (without ``overwrite``) or is not a plan.
      OSError: ``out`` cannot be written.
    """
    from datatools.io.formats.plan_file import GROUP_DOCS, write_plan

    t0 = time.perf_counter()
    lengths, kind = plan_lengths(data, console, input_options)
    if lengths.shape[0] == 0:
        raise ValueError(f"{display(data)}: no documents")
    read_s = time.perf_counter() - t0
    shown = count_progress(console, int(lengths.shape[0]), "packing documents") if console else nullcontext()
    with shown as advance:
        header = write_plan(
            out,
            lengths,
            options,
            group_docs=group_docs or GROUP_DOCS,
            source=display(data),
            overwrite=overwrite,
            progress=advance,
        )
    figures = {k: v for k, v in header.items() if k not in ("format", "version", "digests", "header_sha256")}
    return PackReport(
        **figures,
        plan=display(out),
        input_kind=kind,
        read_seconds=read_s,
        pack_seconds=time.perf_counter() - t0 - read_s,
    )
