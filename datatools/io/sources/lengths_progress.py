"""An input's lengths read in one streaming pass, with its progress shown (bytes read, rate, ETA) on a console.

What ``analyze-padding`` and ``pack`` both do first; their Python APIs take the console (None: nothing shown).
"""

from __future__ import annotations

import numpy as np
from rich.console import Console

from datatools.base.progress import count_progress
from datatools.io.sources.inputs import TokenInput, read_lengths


def read_lengths_shown(inp: TokenInput, console: Console | None = None) -> np.ndarray:
    """Tokens per document of ``inp`` (:func:`~datatools.io.sources.inputs.read_lengths`); with a rich ``console``, the
    tokenizer's summary (a text input) and a progress bar in bytes on it."""
    if console is None:
        return read_lengths(inp)
    if inp.encoder is not None:
        console.print(inp.encoder.summary(), markup=False, highlight=False, soft_wrap=True)
    with count_progress(console, inp.nbytes, "reading lengths", unit="bytes") as advance:
        seen = [0]

        def read(done: int, nbytes: int) -> None:  # cumulative bytes -> the step since the last call
            advance(nbytes - seen[0])
            seen[0] = nbytes

        lengths = read_lengths(inp, progress=read)
        advance(max(0, inp.nbytes - seen[0]))  # what no shard holds (a Parquet footer): the bar ends at its total
        return lengths
