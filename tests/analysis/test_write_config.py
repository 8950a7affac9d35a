"""analyze-padding --write-config: a complete pipeline config that `datatools pipeline` and the integration of the
trainer it names accept as written (MaxText: ctx, segment cap and global batch from its config)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from datatools.cli import main
from datatools.io.formats import array_record_files


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


@pytest.mark.parametrize("near_full", [False, True])
def test_cudnn_flash_te_without_a_cap_gets_one_and_the_maxtext_keys_it_needs(tmp_path, shards, capsys, near_full):
    """Issue 58: MaxText's cudnn_flash_te keeps packed documents apart only with packing: true and
    max_segments_per_seq; the written config caps its rows at the cap the report recommends and says which MaxText
    keys to set (header and terminal), and the integration accepts it with them and refuses it without. Documents
    near the context (``near_full``): the recommendation is padding, with no cap of its own; the MaxText advice's
    cap is written."""
    from datatools.integrations.maxtext import pipeline_config

    if near_full:
        rng = np.random.default_rng(2)
        docs = [{"inputs": rng.integers(1, 500, size=int(rng.integers(1000, 1025))).tolist()} for _ in range(40)]
        shards = str(tmp_path / "full.array_record")
        array_record_files.write(shards, docs)
    base = tmp_path / "base.yml"
    base.write_text(
        f"grain_train_files: '{shards}'\ntokenize_train_data: false\nmax_target_length: 1024\n"
        "per_device_batch_size: 4\nattention: cudnn_flash_te\npacking: false\ndataset_type: grain\n",
        encoding="utf-8",
    )
    out = tmp_path / "pipeline.yaml"
    assert main(["analyze-padding", "--maxtext-config", str(base), "--write-config", str(out)]) == 0
    cap = yaml.safe_load(out.read_text())["packing"]["max_segments"]
    assert isinstance(cap, int) and cap > 0
    needs = f"packing=true max_segments_per_seq={cap}"
    assert f"# MaxText needs: {needs} (its attention keeps packed documents apart only then)" in out.read_text()
    said = " ".join(capsys.readouterr().out.split())
    assert f"MaxText needs {needs}: its attention keeps the packed documents apart only then" in said
    maxtext = {"max_target_length": 1024, "global_batch_size_to_load": 4, "attention": "cudnn_flash_te"}
    assert pipeline_config({**maxtext, "packing": True, "max_segments_per_seq": cap}, str(out)).batch_size == 4
    with pytest.raises(ValueError, match=f"set {needs}$"):
        pipeline_config({**maxtext, "packing": False, "max_segments_per_seq": -1}, str(out))


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


@pytest.mark.parametrize("add", [True, False])
def test_maxtext_bos_and_eos_are_carried_into_the_written_config(tmp_path, spm_model, add):
    """Issue 58: MaxText's tokenizer puts BOS / EOS around every text (base.yml's add_bos / add_eos); the config
    written from its base.yml dropped them (batch 0: 304 documents, 0 BOS, 0 EOS). Now the analysis reads the texts
    as MaxText tokenizes them and the written config delivers the same: BOS and EOS in batch 0, the counts equal."""
    import json

    import sentencepiece as spm

    from datatools.pipeline import build, parse_config

    model, lines = spm_model
    texts = lines[:80]
    for k in range(2):
        array_record_files.write(tmp_path / f"c4.array_record-{k:05d}-of-00002", [{"text": t} for t in texts[k::2]])
    flag = str(add).lower()
    base = tmp_path / "base.yml"
    base.write_text(
        f"grain_train_files: '{tmp_path}/c4.array_record*'\ntokenizer_path: {model}\ntrain_data_columns: ['text']\n"
        f"max_target_length: 256\nper_device_batch_size: 4\nadd_bos: {flag}\nadd_eos: {flag}\n",
        encoding="utf-8",
    )
    out, report = tmp_path / "pipeline.yaml", tmp_path / "r.json"
    args = ["analyze-padding", "--maxtext-config", str(base), "--write-config", str(out), "--json", str(report)]
    assert main(args) == 0
    proc = spm.SentencePieceProcessor(model_file=str(model))
    counted = json.loads(report.read_text())
    assert counted["num_sequences"] == len(texts)
    assert counted["num_tokens"] == sum(len(ids) + 2 * add for ids in proc.encode(texts))  # as MaxText makes them
    written = yaml.safe_load(out.read_text())
    assert (written["source"].get("bos"), written["source"].get("eos")) == (("<s>", "</s>") if add else (None, None))
    batch = next(iter(build(parse_config({**written, "workers": 0}))))
    seg = batch["inputs_segmentation"]
    real = batch["inputs"][seg != 0]
    documents = sum(len(np.unique(row[row != 0])) for row in seg)  # every text fits a row: no piece split off
    assert documents > len(seg)  # packed: rows of several texts
    n_bos, n_eos = (int(np.count_nonzero(real == i)) for i in (proc.bos_id(), proc.eos_id()))
    assert (n_bos, n_eos) == ((documents, documents) if add else (0, 0))


def test_bos_eos_and_tokenizer_settings_given_to_the_analysis_are_written(tmp_path, tokenizer_file, texts):
    """``--bos`` / ``--eos`` / ``--tokenizer-settings keep`` on Parquet text: the written config tokenizes the same
    way (it dropped them, and its epoch delivered fewer tokens than the analysis counted)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts}), tmp_path / "t.parquet")
    out = tmp_path / "pipeline.yaml"
    args = ["analyze-padding", str(tmp_path / "t.parquet"), "--tokenizer", str(tokenizer_file), "--ctx", "512"]
    assert main([*args, "--bos", "--eos", "</s>", "--tokenizer-settings", "keep", "--write-config", str(out)]) == 0
    source = yaml.safe_load(out.read_text())["source"]
    assert (source["bos"], source["eos"], source["tokenizer_settings"]) == ("<s>", "</s>", "keep")
    assert main([*args, "--write-config", str(out), "--overwrite"]) == 0  # nothing asked: nothing written
    assert not {"bos", "eos", "tokenizer_settings"} & set(yaml.safe_load(out.read_text())["source"])
