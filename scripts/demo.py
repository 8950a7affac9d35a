"""`make demo`: datatools end to end on data every machine has, with no download.

1. Documents: the top-level blocks of the Python standard library's sources
   (demo_data/stdlib.parquet, a text column).
2. A byte-level BPE tokenizer trained on them locally (demo_data/tokenizer.json).
3. The pre-tokenize job writes the token store demo_data/store (EOS per document).
4. `datatools analyze-padding demo_data/store --plot demo_data/padding.png`: the
   length distribution, the waste of every strategy, a recommendation.

The shipped configs (configs/*.yaml) read demo_data/store, so after this
`datatools pipeline configs/finetune_packed_1024.yaml --steps 50` runs as is.
"""

from __future__ import annotations

import sys
import time

from rich.console import Console

from datatools.cli import main as datatools
from datatools.jobs.demo_data import DEMO_DIR, build_demo


def main() -> int:
    console = Console(stderr=True)
    t0 = time.perf_counter()
    console.print("[bold]Building the demo data[/] (stdlib sources -> tokenizer -> token store; skipped when present)")
    paths = build_demo(DEMO_DIR)
    console.print(f"demo data ready in {time.perf_counter() - t0:.1f} s: " + ", ".join(str(p) for p in paths.values()))
    console.print("\n[bold]$ datatools analyze-padding demo_data/store --plot demo_data/padding.png[/]")
    status = datatools(["analyze-padding", str(paths["store"]), "--plot", str(DEMO_DIR / "padding.png")])
    if status == 0:
        console.print(
            "\nNext: [bold]datatools pipeline configs/finetune_packed_1024.yaml --steps 50[/] "
            "(configs/README.md lists the others; the command is in .venv/bin: "
            "source .venv/bin/activate first)"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
