"""analyze-padding --write-config writes a config whose one epoch delivers exactly the documents and tokens the
analysis counted (issue 58): over input formats, tokenizer settings, BOS / EOS and trainers; for a source in a bucket
the settings our bucket table measured; the printed config is the file; the report names the chosen trainer's
settings."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import random_docs, write_test_store
from datatools.cli import main
from datatools.io.formats.store import TokenStore
from datatools.io.sources.documents import documents_per_read
from datatools.pipeline import build_canonical, parse_config


def epoch_counts(config_file) -> tuple[int, int]:
    """(documents, tokens) one epoch of the config delivers (its num_batches(0) batches: with num_epochs: null the
    pipeline repeats). A document is counted once, at its first piece (positions: continue numbers a piece split off
    from the offset it starts at); the tokens are the slots of a segment."""
    cfg = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    built = build_canonical(parse_config({**cfg, "positions": "continue"}))
    documents = tokens = 0
    for batch in itertools.islice(built.dataset, built.schedule.num_batches(0)):
        seg, pos = batch["segment_ids"], batch["positions"]
        tokens += int(np.count_nonzero(seg))
        starts = (seg != 0) & np.concatenate([np.ones_like(seg[:, :1], bool), seg[:, 1:] != seg[:, :-1]], axis=1)
        documents += int(np.count_nonzero(starts & (pos == 0)))
    return documents, tokens


@pytest.fixture(scope="module")
def keep_tokenizer(tmp_path_factory, tokenizer_file):
    """The test tokenizer with what `--tokenizer-settings keep` applies: a template putting <s> ... </s> around every
    text and truncation to 300 tokens (`off`, the default, switches both off: other lengths)."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    tok = Tokenizer.from_file(str(tokenizer_file))
    tok.post_processor = TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)])
    tok.enable_truncation(300)
    path = tmp_path_factory.mktemp("keep") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def paragraphs(texts) -> list[str]:
    """200 texts of 0 to ~4,000 characters: paragraphs of stdlib sources, an empty one, a few whole files (longer
    than the ctx below: split across rows)."""
    paras = [p for t in texts[:8] for p in t.split("\n\n") if p.strip()][:190]
    return [*paras[:100], "", *paras[100:], *(t[:4000] for t in texts[10:19])]


def _write_input(kind: str, tmp_path, paragraphs) -> str:
    if kind == "parquet":
        pq.write_table(pa.table({"text": paragraphs}), tmp_path / "t.parquet", row_group_size=64)
        return str(tmp_path / "t.parquet")
    with open(tmp_path / "t.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in paragraphs)
    return str(tmp_path / "t.jsonl")


CASES = [  # format, --tokenizer-settings, BOS / EOS, trainer: each value of each axis at least once
    ("parquet", "keep", ("--bos", "--eos"), "maxtext"),
    ("parquet", "off", ("--bos", "--eos", "</s>"), "levanter"),
    ("parquet", "off", (), "maxtext"),
    ("jsonl", "keep", ("--eos",), "levanter"),
    ("jsonl", "off", ("--bos", "<s>"), "maxtext"),
]


@pytest.mark.parametrize(("kind", "settings", "specials", "trainer"), CASES)
def test_an_epoch_of_the_written_config_delivers_what_the_analysis_counted(
    tmp_path, paragraphs, tokenizer_file, keep_tokenizer, kind, settings, specials, trainer
):
    path = _write_input(kind, tmp_path, paragraphs)
    tok = keep_tokenizer if settings == "keep" else tokenizer_file
    out, report = tmp_path / "pipeline.yaml", tmp_path / "report.json"
    args = ["analyze-padding", path, "--tokenizer", str(tok), "--tokenizer-settings", settings, *specials]
    assert main([*args, "--ctx", "256", "--trainer", trainer, "--write-config", str(out), "--json", str(report)]) == 0
    counted = json.loads(report.read_text())
    written = yaml.safe_load(out.read_text())
    assert written["format"] == trainer and written["source"].get("tokenizer_settings", "off") == settings
    # a text of 0 tokens (the empty one without BOS / EOS) is a document no row can show
    assert epoch_counts(out) == (counted["num_sequences"] - counted["empty"], counted["num_tokens"])
    assert counted["num_tokens"] > 10_000 and counted["lengths"]["max"] > 256  # long documents split across rows


@pytest.mark.parametrize("trainer", ["maxtext", "levanter"])
def test_an_epoch_from_a_token_store_delivers_what_the_analysis_counted(tmp_path, trainer):
    store = write_test_store(tmp_path / "store", random_docs(700, seed=3, max_len=900))
    out, report = tmp_path / "pipeline.yaml", tmp_path / "report.json"
    args = ["analyze-padding", str(store), "--ctx", "512", "--trainer", trainer]
    assert main([*args, "--write-config", str(out), "--json", str(report)]) == 0
    counted = json.loads(report.read_text())
    assert (
        epoch_counts(out)
        == (counted["num_sequences"], counted["num_tokens"])
        == (700, int(TokenStore(store).lengths().sum()))
    )


def test_levanter_config_is_the_one_docs_levanter_shows(tmp_path):
    store = write_test_store(tmp_path / "store", random_docs(300, seed=4))
    out = tmp_path / "pipeline.yaml"
    assert (
        main(["analyze-padding", str(store), "--ctx", "1024", "--trainer", "levanter", "--write-config", str(out)]) == 0
    )
    written = yaml.safe_load(out.read_text())
    assert written["shuffle"] == {"kind": "block", "io_block_size": 64, "window_blocks": 1024}
    assert written["packing"] == {"mode": "streaming", "ctx": 1024, "window": 1024, "overflow": "split"}
    assert written["num_epochs"] is None and written["format"] == "levanter"


def test_a_store_in_a_bucket_gets_blocks_of_whole_reads_and_streaming_packing(s3_bucket, tmp_path):
    """Our bucket table's settings: a block shuffle whose io blocks fill one read (the store's inner chunk), streaming
    packing, one epoch (the analysis's); the pipeline built from it warns of no block smaller than a read and its
    epoch delivers every document."""
    import warnings

    url = f"{s3_bucket}/store"
    write_test_store(url, random_docs(2000, seed=5, max_len=600))
    out, report = tmp_path / "pipeline.yaml", tmp_path / "report.json"
    assert main(["analyze-padding", url, "--ctx", "512", "--write-config", str(out), "--json", str(report)]) == 0
    counted = json.loads(report.read_text())
    read_tokens = counted["input"]["read_tokens"]
    block = documents_per_read(read_tokens, counted["num_tokens"] / counted["num_sequences"])
    written = yaml.safe_load(out.read_text())
    assert block > 64 and written["shuffle"] == {
        "kind": "block",
        "io_block_size": block,
        "window_blocks": 65536 // block,
    }
    assert written["packing"]["mode"] == "streaming" and written["num_epochs"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # _warn_if_blocks_are_smaller_than_reads would fail the run
        assert epoch_counts(out) == (counted["num_sequences"], counted["num_tokens"])


@pytest.mark.parametrize("trainer", ["levanter", "maxtext", None])
def test_the_printed_config_is_the_written_file_and_the_settings_are_the_trainers(tmp_path, capsys, trainer):
    store = write_test_store(tmp_path / "store", random_docs(300, seed=6))
    out = tmp_path / "pipeline.yaml"
    chosen = ["--trainer", trainer] if trainer else []
    assert main(["analyze-padding", str(store), "--ctx", "1024", *chosen, "--write-config", str(out)]) == 0
    printed = capsys.readouterr().out
    assert out.read_text().rstrip("\n") in printed
    assert f"format: {trainer or 'datatools'}\n" in printed and printed.count("format: ") == 1
    if trainer == "levanter":
        assert "Levanter's settings" in printed and "MaxText's own packer" not in printed
        assert re.search(r"^max_seq_len: 1024$", printed, re.M) and re.search(r"^train_batch_size: 32$", printed, re.M)
    else:
        assert "MaxText's own packer" in printed and "Levanter" not in printed
