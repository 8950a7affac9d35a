"""docs/trainers.md's Hugging Face section run as printed, in transformers' own venv (``make test-clients``).

The page's blocks are taken from the page itself (``tests/docs_blocks.py`` reads them), never copied: in a working
directory holding what the Quickstart makes (the demo data ``scripts/demo.py`` writes, as ``make demo``), the page's
named blocks are saved (``hf_pipeline.yaml``, ``train_hf.py``) and its blocks marked ``client transformers`` run in
order, so the check command trains a tiny Llama on CPU through ``train_hf.py``. Checked: every step ran with a finite
loss, the loss falls, and each step's targets (labels other than -100) are those of datatools' batch of that step.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np

from datatools.pipeline import build

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import docs_blocks  # noqa: E402

PAGE = ROOT / "docs" / "trainers.md"


def test_the_transformers_section_runs_as_printed(tmp_path, monkeypatch):
    work = tmp_path / "work"
    docs_blocks.prepare(work)
    env = docs_blocks.environment(work)
    done = docs_blocks.run_client_blocks(PAGE, "transformers", work, env)
    assert [(b.lang, docs_blocks.file_name(b)) for b, _ in done] == [("python", "train_hf.py"), ("bash", None)]
    (script, _), (check, out) = done
    assert (work / "hf_pipeline.yaml").is_file() and '"hf_pipeline.yaml"' in script.text
    assert "python train_hf.py" in check.text
    print(out[-2000:])

    steps = int(re.search(r"--steps (\d+)", check.text).group(1))
    printed = re.findall(r"^step (\d+) loss ([-+\d.eE]+|nan|inf) targets (\d+)$", out, flags=re.M)
    assert [int(s) for s, _, _ in printed] == list(range(steps)), out[-3000:]
    loss = [float(x) for _, x, _ in printed]
    print("transformers loss", [round(x, 3) for x in loss])
    assert all(math.isfinite(x) for x in loss)
    assert np.mean(loss[-3:]) < np.mean(loss[:3]) - 0.5

    monkeypatch.chdir(work)  # the page's relative paths (demo_data/store)
    it = iter(build("hf_pipeline.yaml"))
    counts = [int((np.asarray(next(it)["labels"]) != -100).sum()) for _ in range(steps)]
    assert [int(t) for _, _, t in printed] == counts
