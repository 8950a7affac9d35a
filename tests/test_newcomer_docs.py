"""What a newcomer reads and runs: the README and the Makefile say what they must (issue 21, defects 8 and 10)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_readme_says_where_the_command_is():
    assert ".venv/bin" in README and "source .venv/bin/activate" in README


def test_readme_snippets_that_start_workers_use_the_main_guard():
    """A snippet iterating a config with workers > 0 at a script's top level hung for 22 minutes."""
    with_workers = {
        p.name
        for p in (ROOT / "datatools" / "configs").glob("*.yaml")
        if (yaml.safe_load(p.read_text()) or {}).get("workers", 0) > 0
    }
    assert with_workers  # pretrain_block_8192.yaml starts 2 workers
    checked = 0
    for block in python_blocks(README):
        if any(name in block for name in with_workers) and re.search(r"\biter\(|\bnext\(|\bfor \w+ in build", block):
            assert 'if __name__ == "__main__":' in block, block
            checked += 1
    assert checked


def test_make_test_clients_prints_a_summary_per_client():
    makefile = (ROOT / "Makefile").read_text()
    runs = [line for line in makefile.splitlines() if "-m pytest" in line and "clients" in line]
    assert runs
    for line in runs:
        assert re.search(r" -r[aA]\b", line), line  # a PASSED/FAILED line per test and the "N passed" count
        assert not re.search(r" -q\b", line), line


def test_the_readme_reads_in_a_minute():
    """Issue 23: about 150 lines (at most 200), none over 120 characters; the rest lives in docs/."""
    lines = README.splitlines()
    assert len(lines) <= 200, len(lines)
    assert [n for n, line in enumerate(lines, 1) if len(line) > 120] == []


def test_readme_links_resolve_on_the_package_index():
    """The README is the package index's long description: a relative link there resolves nowhere."""
    targets = re.findall(r"\]\(([^)\s]+)\)", README) + re.findall(r"^\[[^\]]+\]:\s*(\S+)", README, flags=re.M)
    assert targets
    relative = [t for t in targets if not re.match(r"https?://", t)]
    assert relative == []
    for target in targets:  # every link into this repository names a file that exists
        m = re.match(r"https://github\.com/datatools-llm/datatools/(?:blob|tree)/main/(.+)", target)
        if m:
            assert (ROOT / m.group(1)).exists(), target


def test_the_readme_grain_snippet_runs():
    """The README's Grain-from-Python example builds a packed, shuffled MaxText batch as it says."""
    (block,) = [b for b in python_blocks(README) if "PackedRowsMapDataset(" in b]
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    batch, lengths = scope["batch"], scope["lengths"]
    assert {"inputs", "inputs_segmentation", "inputs_position", "targets"} <= set(batch)
    assert batch["inputs"].shape == (32, 1024)
    real = batch["inputs_segmentation"] > 0
    assert 0 < real.sum() <= min(lengths.sum(), 32 * 1024)
    assert len(scope["rows"]) * 1024 >= lengths.sum()  # every token has a slot in some row
