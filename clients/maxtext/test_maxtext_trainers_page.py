"""docs/trainers.md's MaxText section run as printed, in MaxText's own venv (``make test-clients``).

The page's blocks are taken from the page itself (``tests/docs_blocks.py`` reads them), never copied: in a working
directory holding what the Quickstart makes (the demo data ``scripts/demo.py`` writes, as ``make demo``), the page's
named blocks are saved (``maxtext_pipeline.yaml``, ``train_maxtext.py``) and its blocks marked ``client maxtext`` run
in order, so the check command trains MaxText's tiny model on CPU through ``train_maxtext.py``. Checked: MaxText's
metrics file holds every step, with finite losses that fall, and each step's ``total_weights`` is datatools' count of
targets in the batch the integration builds for the command's keys.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
from pathlib import Path

import numpy as np

from datatools.integrations.maxtext import pipeline_config
from datatools.pipeline import build

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import docs_blocks  # noqa: E402

PAGE = ROOT / "docs" / "trainers.md"


def maxtext_keys(words: list[str]) -> dict[str, str]:
    """The ``key=value`` words, the last value of a key winning (as in MaxText)."""
    return dict(w.split("=", 1) for w in words if re.match(r"^[A-Za-z_]\w*=", w))


def test_the_maxtext_section_runs_as_printed(tmp_path, monkeypatch):
    work = tmp_path / "work"
    docs_blocks.prepare(work)
    env = docs_blocks.environment(work, {"JAX_PLATFORMS": "cpu"})
    done = docs_blocks.run_client_blocks(PAGE, "maxtext", work, env)
    assert [(b.lang, docs_blocks.file_name(b)) for b, _ in done] == [("python", "train_maxtext.py"), ("bash", None)]
    (script, _), (check, out) = done
    assert (work / "maxtext_pipeline.yaml").is_file() and "maxtext_pipeline.yaml" in script.text
    print(out[-2000:])

    # the keys MaxText ran with: the script's, then the command's (the last value wins, as in MaxText)
    command = shlex.split(re.sub(r"\\\n\s*", " ", check.text), comments=True)
    keys = maxtext_keys(re.findall(r'"([A-Za-z_]\w*=[^"]*)"', script.text) + command)
    steps = int(keys["steps"])
    metrics = [json.loads(line) for line in (work / keys["metrics_file"]).read_text().splitlines()]
    assert [int(m["step"]) for m in metrics] == list(range(steps))
    loss = [m["learning/loss"] for m in metrics]
    print("MaxText loss", [round(x, 3) for x in loss])
    assert all(math.isfinite(x) for x in loss)
    assert np.mean(loss[-3:]) < np.mean(loss[:3]) - 0.2

    # MaxText's total_weights at each step: datatools' targets in that step's batch (one CPU device: the global batch
    # is per_device_batch_size rows); MaxText's defaults for the keys the command leaves out (base.yml)
    batch = int(float(keys["per_device_batch_size"]))
    mapping = {
        "max_target_length": int(keys["max_target_length"]),
        "global_batch_size_to_load": batch,
        "grain_train_files": keys["grain_train_files"],
        "data_shuffle_seed": 0,
        "max_segments_per_seq": -1,
        "grain_worker_count": 0,  # the same batches with any worker count
        "num_epoch": 1,
        "enable_data_shuffling": True,
    }
    monkeypatch.chdir(work)  # the page's relative paths (demo_data/store)
    it = iter(build(pipeline_config(mapping, work / "maxtext_pipeline.yaml")))
    counts = [int((next(it)["targets_segmentation"] != 0).sum()) for _ in range(steps)]
    assert [int(m["learning/total_weights"]) for m in metrics] == counts
