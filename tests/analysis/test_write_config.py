"""analyze-padding --write-config: a complete pipeline config that `datatools pipeline` and the integration of the
trainer it names accept as written (MaxText: ctx, segment cap and global batch from its config)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from datatools.cli import main
from datatools.io import array_record_files


@pytest.fixture
def shards(tmp_path):
    rng = np.random.default_rng(1)
    for k in range(2):
        docs = [rng.integers(1, 500, size=int(rng.integers(1, 700))).tolist() for _ in range(150)]
        array_record_files.write(tmp_path / f"c4.array_record-{k:05d}-of-00002", [{"inputs": d} for d in docs])
    return str(tmp_path / "c4.array_record*")


def test_maxtext_config_written_is_accepted_by_pipeline_and_the_maxtext_integration(tmp_path, shards):
    from datatools.integrations.maxtext import pipeline_config

    base = tmp_path / "base.yml"
    base.write_text(
        f"grain_train_files: '{shards}'\ntokenize_train_data: false\nmax_target_length: 1024\n"
        "per_device_batch_size: 4\nattention: cudnn_flash_te\nmax_segments_per_seq: 8\n",
        encoding="utf-8",
    )
    out = tmp_path / "pipeline.yaml"
    args = ["analyze-padding", "--maxtext-config", str(base), "--maxtext-set", "devices_per_host=8"]
    assert main([*args, "--write-config", str(out), "--json", str(tmp_path / "r.json")]) == 0
    written = yaml.safe_load(out.read_text())
    assert written["format"] == "maxtext" and written["batch_size"] == 32  # 4 per device x 8 devices
    assert written["packing"]["ctx"] == 1024 and written["packing"]["max_segments"] == 8
    assert written["source"]["path"] == shards
    maxtext = {
        "max_target_length": 1024,
        "global_batch_size_to_load": 32,
        "max_segments_per_seq": 8,
        "grain_train_files": shards,
    }
    parsed = pipeline_config(maxtext, str(out))  # the integration takes it as written
    assert parsed.batch_size == 32 and parsed.format == "maxtext"
    assert main(["pipeline", str(out), "--steps", "2", "--json", str(tmp_path / "p.json")]) == 0


@pytest.mark.parametrize("trainer", ["levanter", "datatools", "hf"])
def test_config_written_for_each_trainer_runs_as_written(tmp_path, shards, trainer):
    out = tmp_path / "pipeline.yaml"
    assert main(["analyze-padding", shards, "--ctx", "1024", "--trainer", trainer, "--write-config", str(out)]) == 0
    written = yaml.safe_load(out.read_text())
    assert written["format"] == trainer and written["source"]["path"] == shards
    assert main(["pipeline", str(out), "--steps", "2", "--json", str(tmp_path / "p.json")]) == 0
    if trainer == "levanter":
        from datatools.integrations.levanter_rows import PipelineRows

        rows = PipelineRows(str(out))
        assert rows.seq_len == 1024 and rows.batch_size == written["batch_size"]
