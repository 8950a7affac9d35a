"""analyze-padding refuses what the pipeline refuses, and writes --write-config where it is told (issue 57):
``--curriculum 512,256`` was sorted silently and ``--curriculum ''`` ignored while the pipeline's
``curriculum.lengths`` refuses both; ``--write-config s3://...`` was written as a local path (``s3:/...``) and an
existing file was replaced silently."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from datatools.cli import main
from datatools.io import storage


@pytest.fixture
def data(tmp_path) -> str:
    (tmp_path / "d").mkdir()
    rng = np.random.default_rng(57)
    np.save(tmp_path / "d" / "lengths.npy", np.clip(rng.lognormal(6, 1, 2000), 1, 4000).astype(np.int64))
    return str(tmp_path / "d")


@pytest.mark.parametrize("lengths", ["512,256", "", "256,256", "100,200", "256,,256"])
def test_a_curriculum_the_pipeline_refuses_is_refused(data, lengths, capsys):
    from datatools.pipeline.config import CurriculumConfig

    values = [int(x) for x in lengths.split(",") if x.strip()]
    with pytest.raises(ValueError):  # the pipeline's own check of curriculum.lengths (tile 128, as --tile)
        CurriculumConfig(lengths=values, tokens_per_batch=8 * 2048).check("curriculum")
    assert main(["analyze-padding", data, "--curriculum", lengths]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--curriculum" in err, err


def test_an_existing_config_is_kept_without_overwrite(data, tmp_path, capsys):
    out = tmp_path / "pipeline.yaml"
    out.write_text("mine: true\n")
    assert main(["analyze-padding", data, "--ctx", "1024", "--write-config", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already exists; pass --overwrite to replace it" in err and len(err.splitlines()) == 1, err
    assert out.read_text() == "mine: true\n"
    assert main(["analyze-padding", data, "--ctx", "1024", "--write-config", str(out), "--overwrite"]) == 0
    assert yaml.safe_load(out.read_text())["packing"]["ctx"] == 1024


def test_write_config_to_a_bucket_writes_the_object(data, s3_bucket, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"{s3_bucket}/configs/pipeline.yaml"
    assert main(["analyze-padding", data, "--ctx", "1024", "--write-config", url]) == 0
    assert not Path("s3:").exists()  # not a local path
    written = yaml.safe_load(storage.location(url).read_bytes())
    assert written["packing"]["ctx"] == 1024
    assert main(["analyze-padding", data, "--ctx", "1024", "--write-config", url]) == 2  # exists: kept
