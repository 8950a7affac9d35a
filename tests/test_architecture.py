"""The layers are folders and imports point one way; no private APIs; a base install (no jax) works."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import random_docs, write_test_store

ROOT = Path(__file__).resolve().parents[1] / "datatools"
# Lower layers never import higher ones (docs/architecture.md).
LAYERS = ["base", "testing", "kernels", "io", "jobs", "analysis", "grain", "pipeline", "integrations", "train", "cli"]


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[0] == "datatools" and parts[1] in LAYERS else None


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        yield name.removesuffix(".__init__"), ast.parse(path.read_text(), str(path))


def imports(tree):
    """(module, names) of every import, at any depth (function-level imports too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


def test_every_module_sits_in_a_layer():
    stray = [m for m, _ in modules() if layer_of(m) is None and m not in ("datatools", "datatools.__main__")]
    assert stray == []


def test_imports_point_down_the_layers():
    wrong = []
    for name, tree in modules():
        mine = layer_of(name)
        for target, _ in imports(tree):
            theirs = layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                wrong.append(f"{name} imports {target}")
    assert wrong == []


def test_no_import_circles():
    """No module reaches itself through its imports (function-level ones too): each layer's modules form a tree of
    imports, so every import can sit at the top of its file. ``from package import module`` is an import of the
    module."""
    found = dict(modules())
    graph = {}
    for name, tree in found.items():
        edges = set()
        for target, names in imports(tree):
            subs = {f"{target}.{n}" for n in names if f"{target}.{n}" in found}
            edges |= subs if names and len(subs) == len(names) else subs | {target}
        graph[name] = {t for t in edges if t in found and t != name}

    def reached(start: str) -> set[str]:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += graph[m]
        return seen

    assert sorted(m for m in graph if m in reached(m)) == []


def test_no_private_apis():
    found = []
    for name, tree in modules():
        for target, names in imports(tree):
            if "._src" in target or target.startswith(("grain._", "jax._")):
                found.append(f"{name}: {target}")
            if target.startswith("datatools.") and target != name:
                found += [f"{name}: {target}.{n}" for n in names if n.startswith("_") and n != "__version__"]
    assert found == []


STORAGE_LAYER = ("datatools.io.storage", "datatools.io.atomic", "datatools.io.paths")


def test_only_the_storage_layer_asks_for_a_url():
    """No module outside the storage layer asks whether a path is a URL (``is_url``, ``"://" in``): it asks its
    location what the place can do (``storage.location(path).can_memory_map``, ``.has_directories``, ...) or calls
    a storage function that does the right thing for both."""
    found = []
    for name, tree in modules():
        if name in STORAGE_LAYER:
            continue
        for node in ast.walk(tree):
            func = node.func if isinstance(node, ast.Call) else None
            if getattr(func, "id", None) == "is_url" or getattr(func, "attr", None) == "is_url":
                found.append(f"{name}:{node.lineno}: is_url")
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and node.left.value == "://":
                found.append(f"{name}:{node.lineno}: '://' in")
    assert found == []


def test_import_and_help_load_no_heavy_module():
    code = (
        "import sys, datatools, datatools.cli; from datatools.cli import main; main(['--help']); "
        "print(sorted(m for m in ('numba', 'grain', 'jax', 'tensorstore', 'pyarrow', 'datasets')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    times = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import datatools"], capture_output=True, text=True, check=True
    ).stderr
    cumulative_us = max(int(line.split("|")[1]) for line in times.splitlines() if line.rstrip().endswith("datatools"))
    assert cumulative_us < 1_000_000


HIDE = "import sys\nfor m in ('jax', 'optax', 'ray'):\n    sys.modules[m] = None  # as if not installed\n"


def run_without_jax(args: list[str]) -> subprocess.CompletedProcess:
    code = HIDE + (
        f"from datatools.cli import main\nrc = main({args!r})\n"
        "assert 'jax' not in sys.modules or sys.modules['jax'] is None\nsys.exit(rc)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_base_install_commands_without_jax(tmp_path):
    store = write_test_store(tmp_path / "store", random_docs(200, seed=1))
    assert run_without_jax(["--version"]).returncode == 0
    assert "analyze-padding" in run_without_jax(["--help"]).stdout
    for args in (["train", "--help"], ["train", "configs/train_cpu_packed.yaml"]):
        proc = run_without_jax(args)
        err = proc.stderr.strip()
        assert proc.returncode == 1 and "\n" not in err, err  # the environment, not the input
        from datatools.base.install import install_command

        assert install_command("jax") in err  # a command that works: this checkout with [jax]
    proc = run_without_jax(["analyze-padding", str(store), "--ctx", "512", "--json", "-"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_sequences"] == 200
    config = tmp_path / "c.yaml"
    config.write_text(f"source: {{path: {store}}}\npacking: {{ctx: 512}}\nbatch_size: 4\n")
    proc = run_without_jax(["pipeline", str(config), "--steps", "3"])
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", ["finetune_packed_1024.yaml", "pretrain_block_8192.yaml", "bucketed.yaml"])
def test_configs_ship_in_the_package(name):
    assert (ROOT / "configs" / name).is_file()
