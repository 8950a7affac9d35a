"""Every code block of the README and of the docs pages, run as printed (tests/test_newcomer_docs.py).

A block runs by its language: ``bash`` as a bash script, ``python`` as a script file (``python block.py``: the
``__main__`` guard a page requires is needed here too), ``yaml`` checked against the config schema. The blocks of
one page run in order in one working directory that holds what the Quickstart makes: ``demo_data/`` (from
``scripts/demo.py``, what ``make demo`` runs), ``configs/`` (the shipped configs), and the names the pages use for
a user's own files: ``data/`` (Parquet text), ``tokenizer.json``. So a block that writes ``store/`` is read by the
next block that reads it, as a reader following the page would.

A block whose first line names a file (``# hf_pipeline.yaml``, or a script's docstring ``train_hf.py: ...``)
is that file of the page: it is saved in the working directory under that name, where a later block reads or runs
it (a client suite runs such a script only through that block); a YAML block is also checked against the schema.
A block printed alike on two pages (language, kind and text) runs on the first of them only.

An HTML comment on the line before a block says when it runs otherwise (it does not show on GitHub or the site):

``<!-- test: synopsis -->``
    a command's synopsis (``[--opt]`` brackets, placeholders): every ``--option`` it names is in the
    command's ``--help``.
``<!-- test: output -->``
    ``$ command`` lines, each followed by what it prints: each command runs, and every number it is printed
    with appears, in order, in what it prints now (the demo's numbers, digit for digit).
``<!-- test: service s3 gcs -->``
    runs against the test's S3 server and GCS emulator: the loopback endpoints the page names
    (``http://127.0.0.1:9000``, ``:9023``) are the test's servers, ``my-bucket`` holds ``data/`` (the demo
    store), ``raw/`` (Parquet text) and ``configs/pipeline.yaml``.
``<!-- test: client NAME -->``
    runs inside a trainer (MaxText, transformers, Levanter), whose client suite (``clients/NAME``, ``make
    test-clients``) runs the block as printed in that trainer's venv (:func:`run_client_blocks`; docs/levanter.md
    in ``clients/levanter/test_levanter_page.py``, docs/trainers.md in ``clients/*/test_*trainers_page.py``):
    here a Python block must compile and every ``datatools`` name it imports must exist; a bash block must parse
    (``bash -n``) and every option of its ``datatools`` commands must be in their ``--help``.
``<!-- test: cluster -->``
    starts processes on other machines (``ray start``): its ``datatools`` commands' options are checked as a
    synopsis; ``make test-cluster`` runs the job on a real two-node cluster.
``<!-- test: make -->``
    ``make`` targets: each must exist (``make -n``); ``make demo`` runs (``scripts/demo.py``).
``<!-- test: illustrative -->``
    not code (a layout, a formula): only for blocks without a language.
``<!-- test: slow -->`` (alone or after another kind)
    runs only under ``pytest -m slow`` (``make test-cluster``): a block that trains or starts many processes.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
KINDS = ("run", "synopsis", "output", "service", "client", "cluster", "make", "illustrative")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.S | re.M)
SAVED_AS = re.compile(r'^(?:# |"""|\'\'\')([\w.-]+\.(?:yaml|yml|py))(?::|$)', flags=re.M)
MARKER = re.compile(r"<!-- test: ([^>]*?) -->\n$")
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?%?")
BIN = Path(sys.executable).parent  # the venv's bin: python, datatools
TIMEOUT_S = 600
DATA_DOCUMENTS = 4000  # in data/train.parquet, a page's Parquet text (prepare)


@dataclass
class Block:
    """One fenced code block: where it is, its language, its text and how it runs (``kind`` and its words)."""

    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    kind: str = "run"
    args: list[str] = field(default_factory=list)
    slow: bool = False

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The page's code blocks, in order, each with the kind its marker gives (``run`` without one)."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()]
        block = Block(page, before.count("\n") + 1, m.group(1), m.group(2))
        marker = MARKER.search(before)
        if marker:
            words = marker.group(1).split()
            block.slow = "slow" in words
            words = [w for w in words if w != "slow"]
            if words:
                block.kind, block.args = words[0], words[1:]
        if block.kind not in KINDS:
            raise ValueError(f"{block.where}: unknown test kind {block.kind!r}; one of {', '.join(KINDS)}")
        out.append(block)
    return out


def run_elsewhere(block: Block) -> Block | None:
    """The first block of an earlier page (in :data:`PAGES` order) with the same language, kind and text, if any:
    a block printed on two pages runs once, on the first (every page starts from the same working directory)."""
    for page in PAGES[: PAGES.index(block.page)]:
        for other in blocks(page):
            if (other.lang, other.kind, other.text) == (block.lang, block.kind, block.text):
                return other
    return None


def file_name(block: Block) -> str | None:
    """The file the block is, when its first line names one (``# NAME.yaml``, a docstring ``NAME.py: ...``)."""
    m = SAVED_AS.match(block.text)
    return m.group(1) if m else None


def save(block: Block, work: Path) -> Path | None:
    """Write a block that names its file into ``work`` under that name (as a reader saves it); its path."""
    name = file_name(block)
    if name is None:
        return None
    (work / name).write_text(block.text, encoding="utf-8")
    return work / name


def environment(work: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a reader has after ``source .venv/bin/activate``: the venv's bin first on PATH."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "200"}
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))
    env.update(extra or {})
    env.pop("PYTHONPATH", None)
    return env


def run(argv: list[str], work: Path, env: dict[str, str], where: str) -> str:
    """Run ``argv`` in ``work``; its stdout and stderr together. A failure names the block."""
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise AssertionError(f"{where}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


def make_function() -> str:
    """A bash ``make`` for the blocks: ``demo`` runs scripts/demo.py here, any other target must exist."""
    return (
        "make() {\n"
        '  for t in "$@"; do\n'
        f'    if [ "$t" = demo ]; then python {shlex.quote(str(ROOT / "scripts" / "demo.py"))} || return 1;\n'
        f'    else command make -n -C {shlex.quote(str(ROOT))} "$t" > /dev/null || return 1; fi\n'
        "  done\n"
        "}\n"
    )


def run_bash(block: Block, work: Path, env: dict[str, str], text: str | None = None) -> str:
    script = "set -euo pipefail\n" + make_function() + (block.text if text is None else text)
    return run(["bash", "-c", script], work, env, block.where)


def run_python(block: Block, work: Path, env: dict[str, str]) -> str:
    script = work / f"block_{block.page.stem}_{block.line}.py"
    script.write_text(block.text, encoding="utf-8")
    return run([sys.executable, script.name], work, env, block.where)


def logical_lines(text: str) -> list[str]:
    """Lines with their ``\\`` continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.split(" #")[0].strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def check_synopsis(block: Block, work: Path, env: dict[str, str]) -> None:
    """Every ``--option`` of every ``datatools CMD`` line is in ``datatools CMD --help``."""
    checked = 0
    for line in logical_lines(block.text):
        words = line.split()
        if words[:1] != ["datatools"]:
            continue
        helptext = run(["datatools", words[1], "--help"], work, env, block.where)
        for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", line):
            assert option in helptext, f"{block.where}: datatools {words[1]} has no {option}"
            checked += 1
    assert checked, f"{block.where}: a synopsis with no datatools option"


def numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def is_subsequence(small: list[str], big: list[str]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def check_output(block: Block, work: Path, env: dict[str, str]) -> None:
    """Each ``$ command`` runs; the numbers printed with it in the page appear, in order, in its output now."""
    parts = re.split(r"^\$ (.*)\n", block.text, flags=re.M)
    assert parts[0].strip() == "" and len(parts) >= 3, f"{block.where}: an output block starts with '$ command'"
    for command, printed in zip(parts[1::2], parts[2::2]):
        got = run_bash(block, work, env, command)
        want = numbers(printed)
        assert want, f"{block.where}: no numbers under $ {command}"
        assert is_subsequence(want, numbers(got)), (
            f"{block.where}: $ {command}\nthe page prints {want}\nthe command prints {numbers(got)}\n{got[-4000:]}"
        )


def check_yaml(block: Block) -> None:
    """A YAML block is config keys: it parses, and with the keys a config needs around it the schema accepts it."""
    import yaml

    from datatools.pipeline import parse_config
    from datatools.pipeline.schema import from_dict
    from datatools.train.loop import TrainSection
    from datatools.train.model import ModelConfig

    data = yaml.safe_load(block.text)
    assert isinstance(data, dict), f"{block.where}: not a mapping"
    base = {"source": {"path": "demo_data/store"}, "packing": {"ctx": 1024}}
    if "sources" in data:
        base.pop("source")
    if isinstance(data.get("packing"), dict) and not {"ctx", "plan"} & set(data["packing"]):
        data["packing"] = {**base["packing"], **data["packing"]}  # a trainer's key gives ctx (MaxText's)
    model, train = data.pop("model", None), data.pop("train", None)
    parse_config({**base, **data})
    from_dict(ModelConfig, model, "model")
    from_dict(TrainSection, train, "train")


def module_names(module: str) -> set[str]:
    """The top-level names a datatools module (or package ``__init__``) defines or imports, read from its source
    (not imported: an integration imports its trainer, which is installed only in that trainer's venv)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"no module {module}"
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def check_client(block: Block, work: Path | None = None, env: dict[str, str] | None = None) -> None:
    """It compiles and every ``datatools`` name it imports exists (the trainer's client suite runs the calls); a
    bash block parses and its ``datatools`` options exist (in ``work`` with ``env``)."""
    import importlib.util

    (client,) = block.args
    assert (ROOT / "clients" / client).is_dir(), f"{block.where}: no client suite clients/{client}"
    if block.lang == "bash":
        assert work is not None and env is not None, f"{block.where}: a bash client block is checked in a directory"
        run(["bash", "-n", "-c", block.text], work, env, block.where)
        if any(line.split()[:1] == ["datatools"] for line in logical_lines(block.text)):
            check_synopsis(block, work, env)
        return
    imports = re.findall(r"^\s*from (datatools[\w.]*) import ([\w, ]+)$", block.text, flags=re.M)
    assert imports, f"{block.where}: a client block that imports nothing of datatools"
    for module, names in imports:
        defined = module_names(module)
        for name in (n.strip() for n in names.split(",")):
            assert name in defined or importlib.util.find_spec(f"{module}.{name}"), (
                f"{block.where}: {module} has no {name}"
            )
    compile(block.text, block.where, "exec")


def run_client_blocks(page: Path, client: str, work: Path, env: dict[str, str]) -> list[tuple[Block, str]]:
    """A client suite's run of ``page`` as printed: every block that names its file is saved in ``work`` (the
    page's configs and scripts), then the blocks marked ``client CLIENT`` run in order (bash as a script, Python
    as ``python block.py``; a script that names its file is only saved: a later block runs it). Each with what it
    printed."""
    done = []
    for block in blocks(page):
        save(block, work)
    for block in blocks(page):
        if block.kind != "client" or block.args != [client]:
            continue
        if block.lang == "bash":
            done.append((block, run_bash(block, work, env)))
        elif block.lang == "python" and file_name(block) is None:
            done.append((block, run_python(block, work, env)))
        elif block.lang == "python":
            done.append((block, ""))
        else:
            raise AssertionError(f"{block.where}: a {block.lang!r} block marked client {client}")
    assert done, f"{page.name}: no block marked client {client}"
    return done


def check_make(block: Block, work: Path, env: dict[str, str]) -> None:
    run_bash(block, work, env)


def prepare(work: Path) -> None:
    """The working directory of a page: the shipped configs, the demo data (scripts/demo.py, as ``make demo``)
    and the names the pages give a user's files (``data/`` holding Parquet text, ``tokenizer.json``)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "configs").symlink_to(ROOT / "datatools" / "configs", target_is_directory=True)
    demo = os.environ.get("DATATOOLS_DOCS_DEMO", "")
    if demo and Path(demo).is_dir():  # a session's demo data, built once (tests/test_newcomer_docs.py)
        shutil.copytree(demo, work / "demo_data", symlinks=True)
    else:
        run([sys.executable, str(ROOT / "scripts" / "demo.py")], work, environment(work), "scripts/demo.py")
    (work / "data").mkdir()
    # a user's Parquet text: the demo's first 4,000 documents in row groups of 1,000 (the whole 23,687, tokenized for
    # their lengths by each page's blocks that read data/, took ~14 s of CPU a block)
    import pyarrow.parquet as pq

    table = pq.read_table(work / "demo_data" / "stdlib.parquet").slice(0, DATA_DOCUMENTS)
    pq.write_table(table, work / "data" / "train.parquet", row_group_size=1000)
    shutil.copyfile(work / "demo_data" / "tokenizer.json", work / "tokenizer.json")
