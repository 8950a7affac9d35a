"""The install as the README documents it (issue 58): a fresh venv, ``pip install`` of this checkout's wheel with no
extras, then the README's data commands on a small Parquet file and the token store ``pretokenize`` makes of it,
their outputs checked. ``pip install .`` once gave a datatools that could read no data (``google_crc32c`` came
only with an extra) and every test ran in the dev venv, which has every extra.

One test, so that ``pytest -n 2`` builds one venv (~15 s from the package index's local mirror, the wheel ~5 s);
the commands ran ~40 s, most of it numba compiling the kernels for the new install, so they run with
``NUMBA_DISABLE_JIT=1`` (the kernels as Python, on 60 documents: ~15 s): numba and llvmlite are still imported from
the install; compiling the kernels is every other test's work (and ``tests/pipeline/test_compile_ahead.py``'s).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from conftest import stdlib_texts
from datatools.jobs.demo_data import train_tokenizer

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def sh(cmd: list, *, timeout: int = 300, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{shlex.join(map(str, cmd))}: exit {proc.returncode}\n{proc.stderr[-4000:]}"
    return proc


def build_wheel(tmp: Path) -> Path:
    """`make wheel`'s command on a copy of what the wheel is built from (setuptools writes build/ and *.egg-info
    into the source folder: not into this checkout, where an egg-info would shadow the dev install's metadata)."""
    src = tmp / "src"
    shutil.copytree(ROOT / "datatools", src / "datatools", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src], timeout=600)
    (wheel,) = (tmp / "dist").glob("datatools_llm-*-py3-none-any.whl")
    return wheel


def fresh_venv(tmp: Path, wheel: Path) -> Path:
    """A venv of the base interpreter (none of the dev venv's packages) with the wheel installed, no extras; pip
    resolves the base dependencies from the package index as a user's would."""
    venv = tmp / "venv"
    sh([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    sh([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-compile", wheel], timeout=600)
    return venv


def small_inputs(tmp: Path) -> tuple[Path, Path, list[list[int]]]:
    """A Parquet file of 60 standard-library sources (a text column), a byte-level BPE tokenizer of 1,000 tokens
    trained on them, and each text's token ids by that tokenizer."""
    texts = stdlib_texts(60)
    tokenizer = train_tokenizer(texts, tmp / "tokenizer.json", vocab_size=1000)
    ids = [e.ids for e in Tokenizer.from_file(str(tokenizer)).encode_batch(texts, add_special_tokens=False)]
    pq.write_table(pa.table({"text": texts}), tmp / "docs.parquet")
    return tmp / "docs.parquet", tokenizer, ids


def test_a_wheel_installed_without_extras_runs_the_readme_data_commands(tmp_path):
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "datatools/configs/finetune_packed_1024.yaml" in names and "datatools/cli/__init__.py" in names
    assert not [n for n in names if n.startswith("tests/")]
    venv = fresh_venv(tmp_path, wheel)
    parquet, tokenizer, ids = small_inputs(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "NUMBA_"))}
    env |= {"PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    env["NUMBA_DISABLE_JIT"] = "1"  # the install is under test, not numba's compiling (the module docstring)

    def datatools(*args, **kwargs) -> subprocess.CompletedProcess:
        return sh([venv / "bin" / "datatools", *args], cwd=work, env=env, **kwargs)

    python = venv / "bin" / "python"
    where = sh([python, "-c", "import datatools; print(datatools.__file__)"], cwd=work, env=env).stdout.strip()
    assert Path(where).is_relative_to(venv)  # the installed copy, not this checkout
    code = "import importlib.util as u; print([m for m in ('jax', 'ray', 's3fs', 'sentencepiece') if u.find_spec(m)])"
    assert sh([python, "-c", code], cwd=work, env=env).stdout.strip() == "[]"  # no extra came along

    num_tokens = sum(len(d) for d in ids)
    # 1. analyze-padding on the Parquet file (text, tokenized by the tokenizer file)
    report = datatools("analyze-padding", parquet, "--tokenizer", tokenizer, "--ctx", "256", "--json", "-")
    report = json.loads(report.stdout)
    assert (report["num_sequences"], report["num_tokens"]) == (60, num_tokens)
    assert report["recommendation"]

    # 2. pretokenize it into a token store; verify reads every chunk back (checksums: google_crc32c)
    datatools("pretokenize", parquet, work / "store", "--tokenizer", tokenizer)
    verify = json.loads(datatools("verify", work / "store", "--json", "-").stdout)
    assert (verify["documents"], verify["tokens"], verify["vocab_size"]) == (60, num_tokens, 1000), verify
    assert verify["checksums"] and verify["max_token"] == max(max(d) for d in ids)

    # 3. the store analyzed as a store: the same documents and tokens
    report = json.loads(datatools("analyze-padding", work / "store", "--ctx", "256", "--json", "-").stdout)
    assert (report["num_sequences"], report["num_tokens"]) == (60, num_tokens)

    # 4. a shipped config by name on the store (README section 2), then an epoch's batches hold exactly its tokens
    datatools(
        "pipeline", "finetune_packed_1024", "--source", work / "store", "--steps", "2", "--set", "packing.ctx=256",
        "--json", work / "pipeline.json",
    )  # fmt: skip
    run = json.loads((work / "pipeline.json").read_text())
    assert run["documents"] == 60 and run["batches"] == 2 and run["shapes"] == [[16, 256]], run
    config = work / "epoch.yaml"
    config.write_text(
        f"source: {{path: {work / 'store'}}}\npacking: {{ctx: 256}}\nbatch_size: 4\ndrop_remainder: false\n"
        "format: datatools\nnum_epochs: 1\nshuffle: {kind: full}\n",
        encoding="utf-8",
    )
    code = (
        "import sys, numpy as np\nfrom datatools.pipeline import build\n"
        "counts = np.zeros(1000, np.int64)\n"
        "for b in build(sys.argv[1]):\n"
        "    counts += np.bincount(b['tokens'][b['segment_ids'] != 0], minlength=1000)\n"
        "np.save(sys.argv[2], counts)\n"
    )
    sh([python, "-c", code, config, work / "counts.npy"], cwd=work, env=env)
    want = np.bincount(np.concatenate([np.asarray(d, np.int64) for d in ids]), minlength=1000)
    assert np.array_equal(np.load(work / "counts.npy"), want)  # every token of the Parquet file, once

    # 5. a missing extra is one line naming a command that installs it from the wheel: its own requirements
    proc = subprocess.run(
        [venv / "bin" / "datatools", "train", "x.yaml"], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    jax = " ".join(f"'{r}'" for r in PYPROJECT["optional-dependencies"]["jax"])
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert proc.stderr.strip().endswith(f"pip install {jax}") and "internal error" not in proc.stderr
