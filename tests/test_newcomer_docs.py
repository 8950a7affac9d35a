"""What a newcomer reads and runs: the README and the Makefile say what they must (issue 21, defects 8 and 10), and
every code block of the README and the docs pages runs as printed (issue 35; tests/docs_blocks.py says how)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import yaml

import docs_blocks

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_readme_says_where_the_command_is():
    assert ".venv/bin" in README and "source .venv/bin/activate" in README


def test_readme_snippets_that_iterate_a_pipeline_use_the_main_guard():
    """A snippet iterating a config with workers > 0 at a script's top level hung for 22 minutes: every README
    snippet that iterates a built pipeline has the guard (a user changes the config, and its workers, later)."""
    # no shipped config sets workers today (the mixture's text reads faster in one process), but a user's may: a
    # table source takes them
    checked = 0
    for block in python_blocks(README):
        if "build(" in block and re.search(r"\biter\(|\bnext\(|\bfor \w+ in build", block):
            assert 'if __name__ == "__main__":' in block, block
            checked += 1
    assert checked


def test_make_test_clients_prints_a_summary_per_client():
    makefile = (ROOT / "Makefile").read_text()
    runs = [line for line in makefile.splitlines() if "-m pytest" in line and "clients" in line]
    assert runs
    for line in runs:
        assert re.search(r" -r[aA]\b", line), line  # a PASSED/FAILED line per test and the "N passed" count
        assert not re.search(r" -q\b", line), line


def test_the_readme_reads_in_a_minute():
    """Issue 23: about 150 lines (at most 200), none over 120 characters; the rest lives in docs/."""
    lines = README.splitlines()
    assert len(lines) <= 200, len(lines)
    assert [n for n, line in enumerate(lines, 1) if len(line) > 120] == []


def test_readme_links_resolve_on_the_package_index():
    """The README is the package index's long description: a relative link there resolves nowhere."""
    targets = re.findall(r"\]\(([^)\s]+)\)", README) + re.findall(r"^\[[^\]]+\]:\s*(\S+)", README, flags=re.M)
    assert targets
    relative = [t for t in targets if not re.match(r"https?://", t)]
    assert relative == []
    for target in targets:  # every link into this repository names a file that exists
        m = re.match(r"https://github\.com/datatools-llm/datatools/(?:blob|tree)/main/(.+)", target)
        if m:
            assert (ROOT / m.group(1)).exists(), target


def test_the_readme_grain_snippet_runs():
    """The README's Grain-from-Python example builds a packed, shuffled MaxText batch as it says."""
    (block,) = [b for b in python_blocks(README) if "PackedRowsMapDataset(" in b]
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    batch, lengths = scope["batch"], scope["lengths"]
    assert {"inputs", "inputs_segmentation", "inputs_position", "targets"} <= set(batch)
    assert batch["inputs"].shape == (32, 1024)
    real = batch["inputs_segmentation"] > 0
    assert 0 < real.sum() <= min(lengths.sum(), 32 * 1024)
    assert len(scope["rows"]) * 1024 >= lengths.sum()  # every token has a slot in some row


# Every code block of the README and of the docs pages runs as printed (tests/docs_blocks.py says how each kind
# runs): one test per page, its blocks in order in one working directory with the demo data.

SLOW_PAGES = [p for p in docs_blocks.PAGES if any(b.slow for b in docs_blocks.blocks(p))]


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory, worker_id) -> Path:
    """The demo data, built once a run by scripts/demo.py (what `make demo` runs; ~10 s), copied per page: under
    xdist the first worker builds it in the run's own temporary directory, the others wait for it (a lock)."""
    import fcntl

    if worker_id == "master":
        work = tmp_path_factory.mktemp("demo")
    else:
        work = tmp_path_factory.getbasetemp().parent / "demo"  # this run's, shared by its workers
    work.mkdir(exist_ok=True)
    with open(work.parent / "demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (work / "built").exists():
            env = docs_blocks.environment(work)
            docs_blocks.run([sys.executable, str(ROOT / "scripts" / "demo.py")], work, env, "demo")
            (work / "built").touch()
    return work / "demo_data"


def bucket_setup(request, work: Path) -> dict[str, str]:
    """The test's S3 server and GCS emulator as the pages' loopback endpoints, each with ``my-bucket`` holding
    ``data/`` (the demo store, and ``train.parquet``: 2,000 of its documents as a token column), ``raw/`` (Parquet
    text: 2,000 documents) and ``configs/pipeline.yaml``."""
    import pyarrow.parquet as pq

    from datatools.io import storage
    from object_storage import gcs_environment, s3_environment

    monkeypatch = request.getfixturevalue("monkeypatch")
    s3, gcs = request.getfixturevalue("s3_proxy"), request.getfixturevalue("gcs_proxy")
    import pyarrow as pa

    from datatools.io.formats.store import TokenStore
    from datatools.io.sources.documents import StoreDocuments

    raw, table = work / "raw.parquet", work / "tokens.parquet"
    pq.write_table(pq.read_table(work / "demo_data" / "stdlib.parquet").slice(0, 2000), raw)
    store = StoreDocuments(TokenStore(str(work / "demo_data" / "store")))
    pq.write_table(pa.table({"input_ids": [store[i].tolist() for i in range(2000)]}), table)
    config = work / "pipeline.yaml"
    for scheme, setenv, proxy in (("s3", s3_environment, s3), ("gs", gcs_environment, gcs)):
        setenv(monkeypatch, proxy.url)
        fs, inner = storage.location(f"{scheme}://my-bucket").filesystem()
        if not fs.exists(inner):
            fs.mkdir(inner)
        store = work / "demo_data" / "store"
        for f in sorted(p for p in store.rglob("*") if p.is_file()):
            fs.pipe_file(f"my-bucket/data/{f.relative_to(store).as_posix()}", f.read_bytes())
        fs.pipe_file("my-bucket/raw/part-0.parquet", raw.read_bytes())
        fs.pipe_file("my-bucket/data/train.parquet", table.read_bytes())  # a token column, as a user's own
        config.write_text(f"source: {{path: {scheme}://my-bucket/data/}}\npacking: {{ctx: 1024}}\nbatch_size: 8\n")
        fs.pipe_file("my-bucket/configs/pipeline.yaml", config.read_bytes())
    s3_environment(monkeypatch, s3.url)  # both sets of variables, as a reader with both clouds has
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    return {"http://127.0.0.1:9000": s3.url, "http://127.0.0.1:9023": gcs.url}


def run_page(page: Path, work: Path, request, slow: bool) -> list[str]:
    """Run the page's blocks in order (the slow ones only when ``slow``); what was done with each."""
    done = []
    docs_blocks.prepare(work)
    env = docs_blocks.environment(work)
    for block in docs_blocks.blocks(page):
        if block.slow and not slow:
            done.append(f"{block.where}: slow (pytest -m slow runs it)")
            continue
        kind = block.kind
        docs_blocks.save(block, work)  # a block that names its file (a config, a script): later blocks read it
        first = docs_blocks.run_elsewhere(block) if kind == "run" else None
        if first is not None:
            done.append(f"{block.where}: as printed at {first.where}, which runs it")
            continue
        if kind == "illustrative":
            assert block.lang == "", f"{block.where}: a {block.lang} block is code: run it, or mark what it needs"
        elif kind == "run" and block.lang == "bash":
            docs_blocks.run_bash(block, work, env)
        elif kind == "run" and block.lang == "python":
            docs_blocks.run_python(block, work, env)
        elif kind == "run" and block.lang == "yaml":
            docs_blocks.check_yaml(block)
        elif kind == "run":
            raise AssertionError(f"{block.where}: a block without a language: mark it output or illustrative")
        elif kind == "synopsis" or kind == "cluster":
            docs_blocks.check_synopsis(block, work, env)
        elif kind == "output":
            docs_blocks.check_output(block, work, env)
        elif kind == "make":
            docs_blocks.check_make(block, work, env)
        elif kind == "client":
            docs_blocks.check_client(block, work, env)
        elif kind == "service":
            endpoints = bucket_setup(request, work)
            text = block.text
            for local, server in endpoints.items():
                text = text.replace(local, server)
            docs_blocks.run_bash(block, work, docs_blocks.environment(work), text)
        done.append(f"{block.where}: {kind}")
    return done


@pytest.mark.parametrize("page", docs_blocks.PAGES, ids=lambda p: p.name)
def test_every_block_of_the_page_runs_as_printed(page, demo_data, tmp_path, monkeypatch, request):
    monkeypatch.setenv("DATATOOLS_DOCS_DEMO", str(demo_data))
    done = run_page(page, tmp_path / "work", request, slow=False)
    print("\n".join(done))


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW_PAGES, ids=lambda p: p.name)
def test_the_slow_blocks_run_as_printed(page, demo_data, tmp_path, monkeypatch, request):
    monkeypatch.setenv("DATATOOLS_DOCS_DEMO", str(demo_data))
    done = run_page(page, tmp_path / "work", request, slow=True)
    print("\n".join(done))


def test_every_block_is_run_or_marked():
    """No page has a block the runner does not know how to check (an unknown marker fails in blocks())."""
    found = [b for p in docs_blocks.PAGES for b in docs_blocks.blocks(p)]
    assert len(found) >= 30
    unmarked_plain = [b.where for b in found if b.lang == "" and b.kind == "run"]
    assert unmarked_plain == []


def test_a_block_printed_on_two_pages_runs_on_the_first():
    """The README's pipeline blocks are printed again in docs/pipelines.md: run once, on the README."""
    readme = [b for b in docs_blocks.blocks(ROOT / "README.md") if b.kind == "run"]
    assert all(docs_blocks.run_elsewhere(b) is None for b in readme)
    pipelines = docs_blocks.blocks(ROOT / "docs" / "pipelines.md")
    twins = [(b, docs_blocks.run_elsewhere(b)) for b in pipelines]
    twins = [(b, first) for b, first in twins if first is not None]
    assert twins and all(first.page.name == "README.md" and first.text == b.text for b, first in twins)
    assert len(twins) < len([b for b in pipelines if b.kind == "run"])  # the page's own blocks still run there


def test_a_bash_client_block_is_checked_here_and_run_by_its_client_suite(tmp_path):
    """docs/levanter.md's commands run in Levanter's client suite (clients/levanter/test_levanter_page.py, which takes
    every block from the page); here each must parse and name only options its datatools command has."""
    env = docs_blocks.environment(tmp_path)

    def block(text: str) -> docs_blocks.Block:
        return docs_blocks.Block(ROOT / "docs" / "levanter.md", 1, "bash", text, "client", ["levanter"])

    docs_blocks.check_client(
        block("datatools analyze-padding s3://b/c --ctx 1024\nfor i in 0 1; do echo $i & done\n"), tmp_path, env
    )
    docs_blocks.check_client(block("for i in 0 1; do python train.py --process-id $i & done\nwait\n"), tmp_path, env)
    with pytest.raises(AssertionError, match="has no --ctxx"):
        docs_blocks.check_client(block("datatools analyze-padding s3://b/c --ctxx 1024\n"), tmp_path, env)
    with pytest.raises(AssertionError, match="exit 2"):
        docs_blocks.check_client(block("for i in 0 1; do echo $i\n"), tmp_path, env)  # no done
    page = [b for b in docs_blocks.blocks(ROOT / "docs" / "levanter.md") if b.kind != "illustrative"]
    assert [(b.lang, b.kind) for b in page] == [
        ("bash", "client"),
        ("yaml", "run"),
        ("bash", "client"),
        ("python", "client"),
        ("bash", "client"),
        ("python", "client"),  # section 6, a cache on local disk: build_cache.py, local.yaml, the commands
        ("yaml", "run"),
        ("bash", "client"),
    ]
    suite = (ROOT / "clients" / "levanter" / "test_levanter_page.py").read_text()
    assert "docs_blocks.blocks(PAGE)" in suite and 'PAGE = ROOT / "docs" / "levanter.md"' in suite


def test_every_client_block_is_run_from_its_page_by_its_client_suite():
    """Issue 35: a block marked ``client NAME`` is run as printed by that client's suite, which takes the blocks from
    the page itself (``docs_blocks.blocks(PAGE)`` or ``docs_blocks.run_client_blocks(PAGE, NAME, ...)``), never from
    a copy: for every page with such blocks, a ``clients/NAME/test_*.py`` names the page and takes them."""
    marked: dict[tuple[str, str], list[str]] = {}
    for page in docs_blocks.PAGES:
        for b in docs_blocks.blocks(page):
            if b.kind == "client":
                marked.setdefault((page.name, b.args[0]), []).append(b.where)
    assert ("levanter.md", "levanter") in marked
    assert ("trainers.md", "maxtext") in marked and ("trainers.md", "transformers") in marked
    for (page, client), where in sorted(marked.items()):
        suites = [f.read_text() for f in sorted((ROOT / "clients" / client).glob("test_*.py"))]
        names_page = [s for s in suites if f'PAGE = ROOT / "docs" / "{page}"' in s]
        takes = [
            s
            for s in names_page
            if "docs_blocks.blocks(PAGE)" in s or f'docs_blocks.run_client_blocks(PAGE, "{client}"' in s
        ]
        assert takes, f"{where}: no clients/{client}/test_*.py takes {page}'s blocks from the page"
    # docs/trainers.md: each trainer's script and its check command, run by that trainer's suite
    trainers = [b for b in docs_blocks.blocks(ROOT / "docs" / "trainers.md") if b.kind == "client"]
    assert [(b.args[0], b.lang, docs_blocks.file_name(b)) for b in trainers] == [
        ("maxtext", "python", "train_maxtext.py"),
        ("maxtext", "bash", None),
        ("transformers", "python", "train_hf.py"),
        ("transformers", "bash", None),
    ]
    for b in trainers:
        if b.lang == "bash":  # the check command runs the script the page saved just before it
            (script,) = [s for s in trainers if s.args == b.args and s.lang == "python"]
            assert f"python {docs_blocks.file_name(script)} " in b.text, b.where


def test_the_pages_numbers_match_the_demo(demo_data, tmp_path):
    """The figures the pages' prose gives for the demo data are what `make demo` makes (mixtures.md said 48 long
    documents where the demo store has 24): the long documents of the mixture page and the loss distortion of the
    loss-weighting page, from the demo store and its analyze-padding report."""
    import json

    import numpy as np

    from datatools.io.formats.store import TokenStore

    lengths = np.asarray(TokenStore(str(demo_data / "store")).lengths())
    long = lengths > 8192
    mixtures = " ".join((ROOT / "docs" / "mixtures.md").read_text().split())
    assert (
        f"The demo store has {long.sum()} documents longer than 8192 tokens "
        f"({long @ lengths / lengths.sum():.0%} of its tokens; the longest is {lengths.max():,} tokens), and the "
        f"Parquet source holds the same {long.sum()} as text: {2 * long.sum()} in the mixture."
    ) in mixtures

    report = tmp_path / "padding.json"
    docs_blocks.run(
        ["datatools", "analyze-padding", str(demo_data / "store"), "--json", str(report)],
        tmp_path,
        docs_blocks.environment(tmp_path),
        "analyze-padding",
    )
    d = json.loads(report.read_text())["loss_distortion"]
    row, batch = d["row_mean"], d["batch_mean"]
    weighting = " ".join((ROOT / "docs" / "loss-weighting.md").read_text().split())
    assert (
        f"On the demo data ({row['documents']:,} documents, ctx {d['ctx']}) a per-row mean weights "
        f"{row['under_half']:.0%} of documents under half and {row['over_2x']:.0%} over twice their unpacked weight "
        f"(p1 {row['quantiles']['p1']:.2f}x, p99 {row['quantiles']['p99']:.1f}x)"
    ) in weighting
    assert batch["max"] <= 1.10 and batch["min"] >= 1 / 1.10  # "a per-batch mean ... stays within 1.10x"


def hooks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_roles_render_as_code_linked_to_their_objects():
    """The API page showed ~80 raw ``:func:``/``:class:`` tags: each is now a code span, linked when the page
    documents the object, and a role the hook cannot render fails the build."""
    render = hooks().render_roles
    page = (
        '<h2 id="datatools.kernels.packing.pack_lengths">pack_lengths</h2>'
        "<p>see :func:<code>pack_lengths</code>, :class:<code>~datatools.x.PackPlan</code> and "
        ":mod:<code>datatools.io</code></p>"
    )
    out = render(page)
    assert '<a href="#datatools.kernels.packing.pack_lengths"><code>pack_lengths</code></a>' in out
    assert "<code>PackPlan</code>" in out and "<code>datatools.io</code>" in out and ":func:" not in out
    with pytest.raises(ValueError, match="a raw role is left"):
        render("<p>:func:`pack_lengths`</p>")


def test_the_site_holds_the_key_reference_the_api_without_roles_and_a_heading_per_trainer(tmp_path):
    """`make docs` (mkdocs build --strict, with scripts/mkdocs_hooks.py): the config key reference is a page of the
    site with every key of the schema, no page shows a raw Sphinx role, the trainers page has one heading per
    trainer."""
    pytest.importorskip("mkdocs")
    import subprocess

    site = tmp_path / "site"
    proc = subprocess.run(
        [str(docs_blocks.BIN / "mkdocs"), "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    assert {"Config key reference": "config-keys.md"} in nav
    keys = (site / "config-keys" / "index.html").read_text()
    reference = hooks().config_reference()
    schema_keys = re.findall(r"^\| `([^`]+)` \|", reference, flags=re.M)
    assert len(schema_keys) > 50
    assert [k for k in schema_keys if f"<code>{k}</code>" not in keys] == []
    for page in site.rglob("*.html"):
        assert not re.search(r":(func|class|meth|mod|attr|exc|data|obj):", page.read_text()), page
    trainers = (site / "trainers" / "index.html").read_text()
    headings = re.findall(r'<h2 id="([^"]+)"', trainers)
    for trainer in ("maxtext", "hugging-face-transformers-trl", "levanter-marin", "your-own-jax-loop-datatools-train"):
        assert trainer in headings, headings
    api = (site / "api" / "index.html").read_text()  # issue 58: the integrations documented, no test helper
    for name in ("maxtext.create_data_iterator", "levanter.data_config", "levanter_rows.PipelineRows"):
        assert f'id="datatools.integrations.{name}"' in api, name
    assert "datatools.testing" not in api and "SlowProxy" not in api
