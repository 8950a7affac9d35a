"""``datatools train`` takes a shipped config by its name, as ``datatools pipeline`` does (issue 58, rerun: after
``pip install '.[jax]'`` there is no ``configs/`` folder, and ``datatools train finetune_document_loss_1024`` said
``config file not found``)."""

from __future__ import annotations

import pytest

from conftest import random_docs, write_test_store
from datatools.cli import main
from datatools.pipeline.named_configs import packaged_configs
from datatools.train.loop import load_train_config


@pytest.mark.parametrize("spelled", ["finetune_document_loss_1024", "configs/finetune_document_loss_1024.yaml"])
def test_a_shipped_training_config_loads_by_name_from_anywhere(tmp_path, monkeypatch, spelled):
    monkeypatch.chdir(tmp_path)  # no configs/ here, as after pip install
    store = write_test_store(tmp_path / "store", random_docs(50, max_len=300))
    cfg = load_train_config(spelled, steps=1, source=str(store))
    assert cfg.train.steps == 1 and cfg.pipeline.one_source.path == str(store)
    assert "finetune_document_loss_1024" in packaged_configs()


def test_a_shipped_training_config_without_the_demo_data_says_to_give_source(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no demo_data/ here
    assert main(["train", "finetune_document_loss_1024", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("datatools: error: demo_data/") and "\n" not in err, err
    assert "name your data with --source" in err
