"""`make demo`: what datatools does, on data every machine has.

Measures document lengths of the Python standard library's source files (in
bytes-level tokens: one token per UTF-8 byte, so no download and no tokenizer
needed), then compares padding against every packing algorithm at ctx 1024 and
2048.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from datatools import ALGORITHMS, pack_lengths


def stdlib_lengths(limit_bytes: int = 8192) -> np.ndarray:
    """Bytes per paragraph (blank-line separated) of the standard library's .py files."""
    root = Path(sysconfig.get_paths()["stdlib"])
    lengths = []
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_bytes()
        except OSError:
            continue
        lengths.extend(len(p) for p in text.split(b"\n\n") if p.strip())
    return np.minimum(np.array(lengths, dtype=np.int64), limit_bytes)


def main() -> None:
    console = Console()
    lengths = stdlib_lengths()
    console.print(f"[bold]{lengths.size:,} paragraphs[/] of the Python standard library, {lengths.sum():,} byte tokens; "
                  f"mean {lengths.mean():.0f}, p50 {np.median(lengths):.0f}, p99 {np.percentile(lengths, 99):.0f}")
    for ctx in (1024, 2048):
        table = Table(title=f"ctx {ctx}: rows needed and useful-token fraction", title_justify="left")
        for c in ("strategy", "rows", "efficiency", "speed-up bound over padding"):
            table.add_column(c, justify="right" if c != "strategy" else "left")
        kept = np.minimum(lengths, ctx)
        pad_eff = kept.sum() / (lengths.size * ctx)
        table.add_row("pad to ctx (truncate)", f"{lengths.size:,}", f"{pad_eff:.1%}", "1.0x")
        for algorithm in ALGORITHMS:
            plan = pack_lengths(lengths, ctx, algorithm=algorithm)
            table.add_row(algorithm, f"{plan.num_rows:,}", f"{plan.efficiency:.1%}", f"{plan.efficiency / pad_eff:.1f}x")
        console.print(table)


if __name__ == "__main__":
    main()
