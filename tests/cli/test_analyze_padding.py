"""`datatools analyze-padding`: every input format, every error, the JSON contract, the plot."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from conftest import random_docs, without_progress, write_test_store
from datatools.cli import main
from datatools.io.sources.inputs import InputOptions, open_input, read_lengths

DOCS = random_docs(300, seed=9, max_len=2000)
LENGTHS = np.array([len(d) for d in DOCS])


def run_json(args, capsys):
    assert main(["analyze-padding", *args, "--ctx", "1024", "--json", "-"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)


def token_table(column="input_ids"):
    return pa.table({column: pa.array([d.tolist() for d in DOCS], pa.list_(pa.int32()))})


def write_inputs(tmp_path):
    """Every supported input holding DOCS; returns {name: (path, extra CLI args)}."""
    out = {}
    pq.write_table(token_table(), tmp_path / "t.parquet", row_group_size=64)
    out["parquet"] = (tmp_path / "t.parquet", [])
    feather.write_feather(token_table("tokens"), tmp_path / "t.feather")
    out["feather"] = (tmp_path / "t.feather", [])
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink, pa.ipc.new_file(sink, token_table().schema) as w:
        w.write_table(token_table())
    out["arrow"] = (tmp_path / "t.arrow", [])
    (tmp_path / "t.jsonl").write_text(
        "".join(json.dumps({"token_ids": d.tolist(), "id": i}) + "\n" for i, d in enumerate(DOCS))
    )
    out["jsonl"] = (tmp_path / "t.jsonl", [])
    import datasets

    datasets.Dataset.from_dict({"input_ids": [d.tolist() for d in DOCS]}).save_to_disk(str(tmp_path / "hf"))
    out["hf"] = (tmp_path / "hf", [])
    flat = np.concatenate(DOCS)
    (tmp_path / "np_len").mkdir()
    np.save(tmp_path / "np_len" / "tokens.npy", flat)
    np.save(tmp_path / "np_len" / "lengths.npy", LENGTHS)
    out["numpy lengths"] = (tmp_path / "np_len", [])
    (tmp_path / "np_off").mkdir()
    np.save(tmp_path / "np_off" / "tokens.npy", flat.astype(np.uint32))
    np.save(tmp_path / "np_off" / "offsets.npy", np.concatenate(([0], np.cumsum(LENGTHS))))
    out["numpy offsets"] = (tmp_path / "np_off", [])
    eos = 1  # random_docs ids are >= 2: add an eos after each document, nanoGPT style
    with_eos = np.concatenate([np.append(d, eos) for d in DOCS])
    with_eos.astype(np.uint16).tofile(tmp_path / "train.bin")
    out["bin"] = (tmp_path / "train.bin", ["--eos-id", "1"])
    np.save(tmp_path / "flat.npy", with_eos.astype(np.int32))
    out["flat npy"] = (tmp_path / "flat.npy", ["--eos-id", "1"])
    out["store"] = (write_test_store(tmp_path / "store", DOCS), [])
    return out


def test_every_input_format(tmp_path, capsys):
    for name, (path, extra) in write_inputs(tmp_path).items():
        rep = run_json([str(path), *extra], capsys)
        want = LENGTHS + 1 if name in ("bin", "flat npy") else LENGTHS
        assert rep["num_sequences"] == len(DOCS), name
        assert rep["num_tokens"] == int(want.sum()), name
        assert rep["lengths"]["max"] == int(want.max()), name
        names = {s["name"] for s in rep["strategies"]}
        assert names == {
            "pad",
            "bucket",
            "next_fit",
            "first_fit",
            "best_fit",
            "first_fit_decreasing",
            "best_fit_decreasing",
            "concat_split",
        }
        for s in rep["strategies"]:
            assert {"name", "ctx", "rows", "efficiency", "dropped_tokens"} <= set(s)
        assert rep["recommendation"]["strategy"]


def test_flat_file_split_across_slices(tmp_path, monkeypatch):
    import datatools.io.formats.numpy_files as readers

    monkeypatch.setattr(readers, "FLAT_SLICE", 37)  # documents straddle many slices
    flat = np.concatenate([np.append(d, 1) for d in DOCS[:50]] + [np.array([5, 6, 7])])  # unterminated tail
    flat.astype(np.uint16).tofile(tmp_path / "x.bin")
    got = read_lengths(open_input(tmp_path / "x.bin", InputOptions(eos_id=1)))
    np.testing.assert_array_equal(got, np.append(LENGTHS[:50] + 1, 3))


def test_text_column_with_a_tokenizer(tmp_path, texts, tokenizer_file, capsys):
    from tokenizers import Tokenizer

    pq.write_table(pa.table({"text": texts}), tmp_path / "x.parquet")
    (tmp_path / "x.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    tok = Tokenizer.from_file(str(tokenizer_file))
    want = [len(tok.encode(t, add_special_tokens=False).ids) for t in texts]
    for f in ("x.parquet", "x.jsonl"):
        rep = run_json([str(tmp_path / f), "--tokenizer", str(tokenizer_file)], capsys)
        assert rep["num_tokens"] == sum(want) and rep["lengths"]["max"] == max(want)


def test_json_stdout_is_only_json_and_plot(tmp_path, capsys):
    path, _ = write_inputs(tmp_path)["parquet"]
    assert main(["analyze-padding", str(path), "--json", "-", "--plot", str(tmp_path / "p.png")]) == 0
    captured = capsys.readouterr()
    rep = json.loads(captured.out)  # nothing but the JSON on stdout
    assert set(rep["lengths"]) >= {"min", "max", "mean", "p50", "p90", "p99"}
    assert rep["contexts"] == sorted(rep["contexts"]) and len(rep["contexts"]) >= 2
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["analyze-padding", str(path), "--ctx", "512", "--json", str(tmp_path / "r.json")]) == 0
    assert "Recommendation" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["contexts"] == [512]


def one_line_error(args, capsys) -> str:
    assert main(["analyze-padding", *args]) == 2
    captured = capsys.readouterr()
    err = without_progress(captured.err).strip()  # progress lines (a run over a quarter second) may precede it
    assert "\n" not in err and "Traceback" not in err and captured.out == ""
    return err


def test_errors(tmp_path, capsys, tokenizer_file):
    (tmp_path / "empty").mkdir()
    (tmp_path / "x.csv").write_text("a,b\n")
    good = tmp_path / "good.parquet"
    pq.write_table(token_table(), good)
    (tmp_path / "trunc.parquet").write_bytes(good.read_bytes()[:200])
    pq.write_table(pa.table({"input_ids": [[1, 2]], "tokens": [[3]]}), tmp_path / "amb.parquet")
    pq.write_table(pa.table({"input_ids": [[1.5, 2.0]]}), tmp_path / "float.parquet")
    pq.write_table(pa.table({"input_ids": [[1, -4]]}), tmp_path / "neg.parquet")
    pq.write_table(pa.table({"text": ["hello"]}), tmp_path / "text.parquet")
    (tmp_path / "bad_tok.json").write_text("{not json")
    (tmp_path / "bad.jsonl").write_text('{"input_ids": [1, 2]}\n{oops\n')
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    cases = [
        ([str(tmp_path / "nope")], "nope: no such file or directory"),
        ([str(tmp_path / "empty")], "empty: empty directory"),
        ([str(tmp_path / "x.csv")], "x.csv: unknown format"),
        ([str(tmp_path / "trunc.parquet")], "trunc.parquet: cannot read Parquet"),
        ([str(good), "--column", "ids"], "good.parquet: no column 'ids' (columns: input_ids)"),
        ([str(tmp_path / "amb.parquet")], "amb.parquet: ambiguous column, candidates: input_ids, tokens"),
        (
            [str(tmp_path / "float.parquet")],
            "float.parquet row group 0: column 'input_ids' holds non-integer token ids",
        ),
        ([str(tmp_path / "neg.parquet")], "neg.parquet row group 0: column 'input_ids': negative token id -4"),
        ([str(tmp_path / "text.parquet")], "text.parquet: column 'text' holds text; pass --tokenizer"),
        (
            [str(tmp_path / "text.parquet"), "--tokenizer", str(tmp_path / "bad_tok.json")],
            "bad_tok.json: not a valid tokenizers JSON file",
        ),
        ([str(tmp_path / "bad.jsonl")], "bad.jsonl:2: invalid JSON Lines"),
        ([str(tmp_path / "odd.bin"), "--eos-id", "0"], "odd.bin: 3 bytes is not a whole number of uint16 tokens"),
        ([str(tmp_path / "odd.bin")], "odd.bin: a flat token file needs --eos-id"),
        ([str(good), "--ctx", "0"], "0 is not in the range 1<=x<=16777216"),
        ([str(good), "--ctx", "-5"], "-5 is not in the range 1<=x<=16777216"),
    ]
    for args, message in cases:
        err = one_line_error(args, capsys)
        assert message in err, (args, err)
        assert err.startswith("datatools: error: ")


def test_faults_name_their_file(tmp_path, capsys, monkeypatch):
    store = write_test_store(tmp_path / "store", DOCS[:20])
    manifest = json.loads((store / "manifest.json").read_text())
    (store / "manifest.json").write_text(json.dumps({**manifest, "num_tokens": "12x"}))
    assert "manifest.json: corrupt (num_tokens must be a non-negative integer" in one_line_error([str(store)], capsys)
    (store / "manifest.json").write_text(json.dumps(manifest)[:40])  # truncated
    assert "manifest.json: corrupt" in one_line_error([str(store)], capsys)
    # a corrupt Parquet footer: its bytes are quoted printably, on one line
    good = tmp_path / "good.parquet"
    pq.write_table(token_table(), good)
    data = good.read_bytes()
    (tmp_path / "footer.parquet").write_bytes(data[:-12] + b"\x01\x02\n\x03\x04\x05\x06\x07PAR1")
    err = one_line_error([str(tmp_path / "footer.parquet")], capsys)
    assert "footer.parquet" in err and all(c >= " " for c in err)
    # a full disk while writing the report names the report
    import datatools.io.storage.atomic as atomic

    def full(f):
        raise OSError(28, "No space left on device")

    real = atomic.atomic_write_with
    monkeypatch.setattr(atomic, "atomic_write_with", lambda path, write: real(path, full))
    assert main(["analyze-padding", str(good), "--ctx", "512", "--json", str(tmp_path / "r.json")]) == 1
    err = capsys.readouterr().err
    assert err.strip().endswith("r.json: No space left on device") and not (tmp_path / "r.json").exists()
    assert not list(tmp_path.glob(".r.json*"))  # no temporary file left


def test_the_report_says_which_contexts_were_chosen_and_why(tmp_path, capsys):
    """Issue 21, defect 10: the defaults are capped at 32,768 and can collapse; the output says so, and the
    --ctx help describes what the code does."""
    from click.testing import CliRunner

    from datatools.analysis.padding import DEFAULT_CTX_CAP, PaddingOptions, analyze, default_contexts
    from datatools.cli.analyze_padding import analyze_padding_command

    long = np.full(50, 100_000)  # every document over the cap: the four defaults merge into one
    assert default_contexts(long, 128) == [DEFAULT_CTX_CAP]
    note = analyze(long, PaddingOptions(strategies=("pad",))).contexts_note
    assert "capped at 32,768" in note and "1 left of 4" in note and "longest document (100,000 tokens)" in note
    given = analyze(LENGTHS, PaddingOptions(contexts=(512, 1024), strategies=("pad",))).contexts_note
    assert given == "contexts evaluated: 512, 1,024 (as given with --ctx)"

    help_text = " ".join(CliRunner().invoke(analyze_padding_command, ["--help"]).output.split())
    assert "capped at 32,768" in help_text and "longest document" not in help_text

    write_test_store(tmp_path / "store", DOCS)
    assert main(["analyze-padding", str(tmp_path / "store")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    p90, p99 = np.percentile(LENGTHS, [90, 99])
    assert "contexts evaluated: " in out and f"p90 {p90:,.0f}, p99 {p99:,.0f}" in out


def test_the_recommended_max_segments_says_why(tmp_path, capsys):
    write_test_store(tmp_path / "store", DOCS)
    report = run_json([str(tmp_path / "store")], capsys)
    rec = report["recommendation"]
    assert rec["strategy"] != "pad" and rec["max_segments"] is not None
    reason = rec["max_segments_reason"]
    assert reason.startswith(f"max_segments {rec['max_segments']}: ") and "fixed cap on documents per row" in reason
    assert main(["analyze-padding", str(tmp_path / "store"), "--ctx", "1024", "--max-segments", "5"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "why max_segments 5: as given (--max-segments)" in out
