"""Progress that moves (issue 35): every command says what it is doing within 1 s of its start, off a terminal
and on one, and the analyzer's tables fit an 80-column terminal with every value whole (all of them in --json).

Each command runs as a user runs it, a subprocess, on inputs that keep it busy for over a second; the first line
it prints is read with a timeout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rich.cells import cell_len

import datatools
from conftest import PROGRESS_LINE, write_test_store

CONFIGS = Path(datatools.__file__).parent / "configs"
FIRST_LINE_BY_S = 1.0  # the bound: a live line from the first second


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, texts, tokenizer_file) -> dict[str, Path]:
    """A JSON Lines text input (~3 MB: seconds of tokenizing), a token store and a mixture config over both."""
    root = tmp_path_factory.mktemp("live")
    source = "".join(texts)
    with open(root / "docs.jsonl", "w") as f:
        for at in range(0, 3_000_000, 1500):
            f.write(json.dumps({"text": source[at % len(source) : at % len(source) + 1500]}) + "\n")
    rng = np.random.default_rng(0)
    write_test_store(root / "store", [rng.integers(0, 1000, int(n)) for n in rng.integers(20, 1500, 4000)], 1000)
    (root / "mixture.yaml").write_text(
        f"sources:\n"
        f"  - {{path: {root / 'store'}, name: store, weight: 0.7}}\n"
        f"  - {{path: {root / 'docs.jsonl'}, name: text, column: text, tokenizer: {tokenizer_file}, weight: 0.3}}\n"
        "packing: {mode: streaming, ctx: 2048, algorithm: first_fit, window: 64}\n"
        "batch_size: 8\nformat: datatools\nworkers: 0\n"
    )
    return {"root": root, "jsonl": root / "docs.jsonl", "store": root / "store", "mixture": root / "mixture.yaml"}


def commands(inputs: dict[str, Path], tokenizer_file: Path) -> dict[str, list[str]]:
    jsonl, store, root = str(inputs["jsonl"]), str(inputs["store"]), inputs["root"]
    tok = ["--tokenizer", str(tokenizer_file)]
    return {
        "pretokenize": ["pretokenize", jsonl, str(root / "out-store"), *tok, "--overwrite"],
        "analyze-padding": ["analyze-padding", jsonl, *tok],
        "pack": ["pack", jsonl, str(root / "plan"), "--ctx", "1024", *tok, "--overwrite"],
        "pipeline": ["pipeline", "finetune_packed_1024", "--source", store, "--steps", "4", "--step-time", "0.4"],
        "verify": ["verify", store],
        "mix-report": ["mix-report", str(inputs["mixture"]), "--batches", "20"],
        "explain": ["explain", str(inputs["mixture"]), "--step", "3"],
        "shuffle-report": ["shuffle-report", "--n", "4000000", "--io-block-size", "64", "--window-blocks", "64"]
        + ["--group-size", "4096", "--batch-size", "256"],
        "train": ["train", str(CONFIGS / "train_cpu_packed.yaml"), "--source", store, "--steps", "2"],
    }


def first_line(args: list[str], *, env: dict | None = None) -> tuple[float, str, float, int, str]:
    """Run ``datatools ARGS`` off a terminal: (seconds to its first line on stderr or stdout, that line, seconds
    it ran, exit status, all it printed)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "datatools", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    first_at, line = float("nan"), b""
    if select.select([proc.stdout], [], [], 30)[0]:
        line = proc.stdout.readline()
        first_at = time.monotonic() - t0
    rest = proc.stdout.read()
    status = proc.wait(timeout=300)
    return first_at, line.decode().rstrip("\n"), time.monotonic() - t0, status, (line + rest).decode()


@pytest.mark.timing  # a wall-clock bound: on a loaded 2-core CI machine a process may not run for seconds
@pytest.mark.parametrize(
    "name",
    [
        *("pretokenize", "analyze-padding", "pack", "pipeline", "verify", "mix-report", "explain"),
        *("shuffle-report", "train"),
    ],
)
def test_every_command_prints_what_it_is_doing_within_a_second(name, inputs, tokenizer_file):
    if name == "train" and importlib.util.find_spec("jax") is None:
        pytest.skip("datatools train needs the jax extra")
    args = commands(inputs, tokenizer_file)[name]
    first_at, line, took, status, printed = first_line(args)
    assert status == 0, printed[-3000:]
    assert first_at < FIRST_LINE_BY_S, f"{name}: first line after {first_at:.2f} s (ran {took:.1f} s): {line!r}"
    if took > FIRST_LINE_BY_S + 0.5:  # a command that works that long says what it is doing as it goes
        said = [x for x in printed.splitlines() if PROGRESS_LINE.fullmatch(x)]
        assert said and said[0].startswith((f"datatools {name}: ", "tokenizing: ", "reading lengths: ")), printed


def run_on_terminal(args: list[str], columns: int) -> tuple[str, list[str], int]:
    """Run ``datatools ARGS`` on a pseudo-terminal ``columns`` wide: (the first line it drew, styles dropped; the
    lines of what it drew with cursor moves undone as a terminal would leave them; exit status)."""
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "datatools", *args], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    data = b""
    while True:
        ready = select.select([master], [], [], 0.05)[0]
        if ready:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            data += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    text = data.decode(errors="replace")
    drawn = [line for line in re.split(r"\r\n|\n|\r", ANSI.sub("", text)) if line.strip()]
    return drawn[0] if drawn else "", screen_lines(text), proc.wait()


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # a style or a cursor move


def screen_lines(text: str) -> list[str]:
    """What stays on screen: ANSI styles dropped, erased (transient) lines removed."""
    lines: list[str] = [""]
    for token in re.split(r"(\x1b\[[0-9;?]*[A-Za-z]|\r\n|\n|\r)", text):
        if token in ("\r\n", "\n"):
            lines.append("")
        elif token == "\r":
            lines[-1] = ""
        elif token.startswith("\x1b["):
            if token.endswith("A"):  # cursor up: the live display redraws those lines
                lines.pop()
            elif token.endswith("K"):
                lines[-1] = ""
        else:
            lines[-1] += token
    return [line for line in lines if line.strip()]


def test_on_an_80_column_terminal_a_live_line_comes_first_and_every_table_fits(inputs, tokenizer_file, tmp_path):
    report = tmp_path / "report.json"
    args = ["analyze-padding", str(inputs["store"]), "--ctx", "1024", "--ctx", "2048", "--json", str(report)]
    first, lines, status = run_on_terminal([*args, "--maxtext-set", "max_target_length=1024"], 80)
    assert status == 0, "\n".join(lines[-20:])
    assert re.fullmatch(r"\S? ?datatools analyze-padding: .*", first), first  # (a spinner, then) the live line first
    verbatim = re.compile(r" +(path|tokenizer): \S+")  # the printed config's file names: as the file holds them
    wide = [line for line in lines if cell_len(line) > 80 and not verbatim.fullmatch(line)]
    assert not wide, wide
    screen = "\n".join(lines)
    assert "…" not in screen  # no value cut
    assert "not shown at 80 columns: attn dense/doc, max docs/row" in screen  # what went, said
    for ctx in ("1,024", "2,048"):
        assert f"ctx {ctx}" in screen
    data = json.loads(report.read_text())  # every value of every column, whatever the width
    assert {row["ctx"] for row in data["strategies"]} == {1024, 2048}
    for row in data["strategies"]:
        assert {"attention_saving", "max_docs_per_row", "docs_per_row", "efficiency"} <= set(row), row
        assert f"{row['efficiency']:.2%}" in screen  # the efficiencies all shown, whole
