"""Paths as users type them, outputs other users can read, and permission errors that say so."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import random_docs, without_progress, write_test_store
from datatools.cli import main
from datatools.io import TokenStore
from datatools.jobs.pretokenize import pretokenize
from datatools.pipeline import build

DOCS = random_docs(120, seed=3, max_len=600)
LENGTHS = [len(d) for d in DOCS]


def analyze_json(path, capsys, *extra) -> dict:
    assert main(["analyze-padding", os.fsdecode(path), "--ctx", "512", "--json", "-", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_dot_dot_spaces_and_symlinks(tmp_path, capsys, texts, tokenizer_file):
    base = tmp_path / "my data"
    (base / "sub").mkdir(parents=True)
    write_test_store(base / "a store", DOCS)
    pq.write_table(pa.table({"input_ids": [d.tolist() for d in DOCS]}), base / "docs file.parquet", row_group_size=40)
    os.symlink(base / "a store", tmp_path / "link to store")
    dotted = base / "sub" / ".." / "a store"
    for path in (dotted, tmp_path / "link to store", base / "sub" / ".." / "docs file.parquet"):
        rep = analyze_json(path, capsys)
        assert rep["num_sequences"] == len(DOCS) and rep["num_tokens"] == sum(LENGTHS), path
    # a pipeline over '..' paths: a store and a Parquet file give the same batches
    cfg = {"packing": {"ctx": 512}, "batch_size": 4, "shuffle": {"kind": "none"}}
    via_store = list(build({**cfg, "source": {"path": str(dotted)}}))
    via_parquet = list(build({**cfg, "source": {"path": str(base / "sub" / ".." / "docs file.parquet")}}))
    assert len(via_store) == len(via_parquet) > 0
    for a, b in zip(via_store, via_parquet):
        np.testing.assert_array_equal(a["tokens"], b["tokens"])
    # pretokenize into a '..' output, from a path with spaces, then read it through a relative '..' path
    (base / "in put").mkdir()
    (base / "in put" / "t x.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:6]))
    out = base / "sub" / ".." / "out store"
    result = pretokenize(base / "sub" / ".." / "in put", out, tokenizer_file, progress=False)
    assert result.documents == 6 and (base / "out store" / "manifest.json").is_file()
    assert not (base / "out store.partial").exists()
    old = os.getcwd()
    os.chdir(base / "sub")
    try:
        assert len(TokenStore("../out store")) == 6
        assert analyze_json(Path("..") / "out store", capsys)["num_sequences"] == 6
    finally:
        os.chdir(old)


def test_non_utf8_file_names(tmp_path, capsys, texts, tokenizer_file):
    root = os.fsencode(tmp_path)
    d = root + b"/in\xff"
    os.mkdir(d)
    with open(d + b"/caf\xe9.parquet", "wb") as f:
        pq.write_table(pa.table({"input_ids": [x.tolist() for x in DOCS[:50]]}), f)
    with open(d + b"/r\xe9sum\xe9.jsonl", "w") as f:
        f.writelines(json.dumps({"input_ids": x.tolist()}) + "\n" for x in DOCS[50:])
    rep = analyze_json(d, capsys)
    assert rep["num_sequences"] == len(DOCS) and rep["num_tokens"] == sum(LENGTHS)
    # a broken file with such a name is named in a printable one-line error
    with open(d + b"/z\xfe.jsonl", "w") as f:
        f.write('{"input_ids": [1]}\n{broken\n')
    assert main(["analyze-padding", os.fsdecode(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "in\\xff/z\\xfe.jsonl:2: invalid JSON Lines" in err
    # text input with such names pre-tokenizes; the tokenizer itself may have such a name
    t = root + b"/t\xff"
    os.mkdir(t)
    with open(t + b"/a\xe9.jsonl", "w") as f:
        f.writelines(json.dumps({"text": x}) + "\n" for x in texts[:5])
    tok = root + b"/tok\xe9.json"
    shutil.copy(tokenizer_file, os.fsdecode(tok))
    result = pretokenize(os.fsdecode(t), tmp_path / "store", os.fsdecode(tok), progress=False)
    assert result.documents == 5


def test_outputs_follow_the_umask(tmp_path, capsys, texts, tokenizer_file):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:8]))
    old = os.umask(0o002)
    try:
        pretokenize(tmp_path / "in", tmp_path / "store", tokenizer_file, progress=False)
        assert (
            main(
                [
                    "analyze-padding",
                    str(tmp_path / "store"),
                    "--ctx",
                    "512",
                    "--json",
                    str(tmp_path / "r.json"),
                    "--plot",
                    str(tmp_path / "p.png"),
                ]
            )
            == 0
        )
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "store").rglob("*") if p.is_file()] + [tmp_path / "r.json", tmp_path / "p.png"]
    assert len(files) > 4
    for p in files:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == 0o664, (p, oct(mode))
    for p in [tmp_path / "store", *[p for p in (tmp_path / "store").rglob("*") if p.is_dir()]]:
        assert stat.S_IMODE(p.stat().st_mode) & 0o070 == 0o070, p


def _without_file_permission_override() -> list[str] | None:
    """A command prefix under which file permissions apply (root bypasses them); None when none is available."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    return [setpriv, "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]


def test_unreadable_files_are_named_as_permission_errors(tmp_path):
    prefix = _without_file_permission_override()
    if prefix is None:
        pytest.skip("running as root without setpriv: permissions cannot be enforced")
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    pq.write_table(pa.table({"input_ids": [x.tolist() for x in DOCS]}), d / "a.parquet")
    pq.write_table(pa.table({"input_ids": [x.tolist() for x in DOCS]}), d / "b.parquet")
    (d / "b.parquet").chmod(0)
    store = write_test_store(tmp_path / "store", DOCS)
    (store / "manifest.json").chmod(0)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    for path, name in ((d, "b.parquet"), (store, "manifest.json")):
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "datatools", "analyze-padding", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        err = without_progress(proc.stderr).strip()  # what the command said: its progress lines left out
        assert proc.returncode == 1 and "\n" not in err and "Traceback" not in err, err
        assert err.endswith(f"{name}: Permission denied") and "no input files" not in err, err
