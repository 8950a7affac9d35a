"""The same format tests against a local directory, the S3 server and the GCS emulator (both on loopback).

For every input format, the lengths (Python API), the ``analyze-padding`` JSON report
(command line), and the batches of a pipeline are identical whether the data is read
from local files, from ``s3://`` or from ``gs://``; config files and reports live in
the same place as the data.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from conftest import random_docs
from datatools.cli import main
from datatools.io.formats.discover import list_shards
from datatools.io.formats.tables import shard_texts
from datatools.io.sources.inputs import InputOptions, open_documents, open_input, read_lengths

DOCS = random_docs(240, seed=11, max_len=1500)
LENGTHS = np.array([len(d) for d in DOCS], np.int64)
EOS = 1  # random_docs ids are >= 2
TIMINGS = ("read_seconds", "analyze_seconds", "source", "input")  # differ by run / by where the data is


def _table(column="input_ids"):
    return pa.table({column: pa.array([d.tolist() for d in DOCS], pa.list_(pa.int32()))})


def _write_arrow_file(path, table):
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=50)


def _write_arrow_stream(path, table):
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table, max_chunksize=70)


def make_format(name: str, where):
    """Write format ``name`` holding DOCS under the local directory ``where``; (path, open_input kwargs, CLI args,
    expected lengths)."""
    import datasets

    extra, cli, want = {}, [], LENGTHS
    if name == "parquet":
        path = where / "t.parquet"
        pq.write_table(_table(), path, row_group_size=64)
    elif name == "feather":
        path = where / "t.feather"
        feather.write_feather(_table("tokens"), path, chunksize=80)
    elif name == "arrow_stream":
        path = where / "t.arrow"
        _write_arrow_stream(path, _table())
    elif name == "jsonl":
        path = where / "t.jsonl"
        path.write_text("".join(json.dumps({"token_ids": d.tolist(), "id": i}) + "\n" for i, d in enumerate(DOCS)))
    elif name == "tree":  # a directory: parquet files at two levels, an HF directory inside, hidden files skipped
        path = where / "tree"
        (path / "b" / "c").mkdir(parents=True)
        pq.write_table(_table().slice(0, 60), path / "z.parquet", row_group_size=16)
        pq.write_table(_table().slice(60, 60), path / "b" / "a.parquet")
        _write_arrow_file(path / "b" / "c" / "x.arrow", _table().slice(120, 60))
        datasets.Dataset.from_dict({"input_ids": [d.tolist() for d in DOCS[180:]]}).save_to_disk(str(path / "hf"))
        (path / ".hidden.parquet").write_bytes(b"not parquet")
        # os.walk order: a directory's files (z.parquet) before its subdirectories (b/, then hf/), not name order
    elif name == "hf":
        path = where / "hf"
        datasets.Dataset.from_dict({"input_ids": [d.tolist() for d in DOCS]}).save_to_disk(str(path), num_shards=3)
    elif name == "hf_dict":
        path = where / "hf_dict"
        datasets.DatasetDict(
            {
                "train": datasets.Dataset.from_dict({"input_ids": [d.tolist() for d in DOCS[:200]]}),
                "test": datasets.Dataset.from_dict({"input_ids": [d.tolist() for d in DOCS[200:]]}),
            }
        ).save_to_disk(str(path))
    elif name == "numpy":
        path = where / "np"
        path.mkdir()
        np.save(path / "tokens.npy", np.concatenate(DOCS))
        np.save(path / "offsets.npy", np.concatenate(([0], np.cumsum(LENGTHS))))
    elif name == "bin":
        path = where / "train.bin"
        np.concatenate([np.append(d, EOS) for d in DOCS]).astype(np.uint16).tofile(path)
        extra, cli, want = {"eos_id": EOS}, ["--eos-id", str(EOS)], LENGTHS + 1
    elif name == "flat_npy":
        path = where / "flat.npy"
        np.save(path, np.concatenate([np.append(d, EOS) for d in DOCS]).astype(np.int32))
        extra, cli, want = {"eos_id": EOS}, ["--eos-id", str(EOS)], LENGTHS + 1
    else:
        raise AssertionError(name)
    return path, extra, cli, want


FORMATS = ["parquet", "feather", "arrow_stream", "jsonl", "tree", "hf", "hf_dict", "numpy", "bin", "flat_npy"]


def cli_report(args, capsys) -> dict:
    assert main(["analyze-padding", *args, "--ctx", "1024", "--json", "-"]) == 0
    rep = json.loads(capsys.readouterr().out)
    for s in rep["strategies"]:
        s.pop("seconds", None)  # the simulation's own run time
    return {k: v for k, v in rep.items() if k not in TIMINGS}


@pytest.fixture(scope="module")
def local_reports():
    return {}  # format -> the local CLI report, computed once and compared against each server


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_reads_the_same_everywhere(fmt, storage_root, tmp_path, capsys, local_reports):
    local, extra, cli, want = make_format(fmt, tmp_path)
    path = storage_root.upload(local, local.name)
    inp = open_input(path, InputOptions(**extra))
    got = read_lengths(inp)
    np.testing.assert_array_equal(got, want)
    assert inp.describe()["path"] == path
    rep = cli_report([path, *cli], capsys)
    if fmt not in local_reports:
        local_reports[fmt] = cli_report([str(local), *cli], capsys)
    assert rep == local_reports[fmt]
    assert rep["num_sequences"] == want.size and rep["num_tokens"] == int(want.sum())


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "hf", "numpy"])
def test_documents_read_the_same_everywhere(fmt, storage_root, tmp_path):
    """Every document's tokens, read on demand (the pipeline's source), equal the local ones."""
    local, extra, _, _ = make_format(fmt, tmp_path)
    docs = open_documents(open_input(storage_root.upload(local, local.name), InputOptions(**extra)))
    assert len(docs) == len(DOCS)
    rng = np.random.default_rng(3)
    for i in rng.permutation(len(DOCS))[:40].tolist():
        np.testing.assert_array_equal(docs[i], DOCS[i])


def _pipeline_config(source: str) -> str:
    return (
        f"source: {{path: {json.dumps(source)}}}\npacking: {{ctx: 512}}\n"
        "shuffle: {kind: block, io_block_size: 8, window_blocks: 4}\n"
        "batch_size: 4\nseed: 5\ndrop_remainder: false\nworkers: 0\n"
    )


def _batches(config: str, steps: int) -> list[dict]:
    from datatools.pipeline import build_canonical, load_config

    it = iter(build_canonical(load_config(config)).dataset)
    return [next(it) for _ in range(steps)]


@pytest.mark.parametrize("fmt", ["parquet", "hf"])
def test_pipeline_config_and_data_in_storage_give_the_local_batches(fmt, storage_root, tmp_path, capsys):
    local, _, _, _ = make_format(fmt, tmp_path)
    (tmp_path / "local.yaml").write_text(_pipeline_config(str(local)))
    want = _batches(str(tmp_path / "local.yaml"), 6)
    data = storage_root.upload(local, local.name)
    (tmp_path / "remote.yaml").write_text(_pipeline_config(data))
    config = storage_root.upload(tmp_path / "remote.yaml", "cfg/pipeline.yaml")  # the config in storage too
    got = _batches(config, 6)
    for a, b in zip(want, got, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    report = storage_root.path("report.json")
    assert main(["pipeline", config, "--steps", "3", "--json", report]) == 0
    from datatools.io import storage

    written = json.loads(storage.location(report).read_bytes())
    assert written["batches"] == 3 and written["documents"] == len(DOCS)


def test_report_and_plot_written_to_storage(storage_root, tmp_path, capsys):
    local, _, _, _ = make_format("parquet", tmp_path)
    data = storage_root.upload(local, "t.parquet")
    out, png = storage_root.path("pad.json"), storage_root.path("pad.png")
    assert main(["analyze-padding", data, "--ctx", "1024", "--json", out, "--plot", png]) == 0
    from datatools.io import storage

    rep = json.loads(storage.location(out).read_bytes())
    assert rep["num_sequences"] == len(DOCS) and rep["num_tokens"] == int(LENGTHS.sum())
    assert storage.location(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_files_read_the_same_everywhere(storage_root, tmp_path, texts):
    """Plain text (the pretokenize job's input): one document per file, bytes as written."""
    tree = tmp_path / "texts"
    (tree / "sub").mkdir(parents=True)
    for i, t in enumerate(texts[:12]):
        (tree / ("sub" if i % 3 else ".") / f"{i:02d}.txt").write_text(t, encoding="utf-8")
    want = [t for s in list_shards(tree) for t in next(shard_texts(s))]
    got = [t for s in list_shards(storage_root.upload(tree, "texts")) for t in next(shard_texts(s))]
    assert got == want and len(got) == 12
