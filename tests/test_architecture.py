"""The layers are folders and imports point one way; no private APIs; a base install (no jax) works."""

from __future__ import annotations

import ast
import inspect
import json
import re
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


STORAGE_LAYER = ("datatools.io.storage", "datatools.io.storage.atomic", "datatools.io.storage.paths")


def test_only_the_storage_layer_asks_for_a_url():
    """No module outside the storage layer asks whether a path is a URL (``is_url``, ``"://" in``): it asks its
    location what the place can do (``storage.location(path).can_memory_map``, ``.has_directories``, ...) or calls
    a ``Location`` method that does the right thing for both."""
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


# One way through each layer (issue 56): rule 6, PackOptions is the only currency of a packing's options below
# pipeline/config.py, and the default algorithm is written once.
DEFAULT_ALGORITHM_HOMES = {  # module -> the assignments that may spell out the default algorithm's name
    "datatools.base.checks": {"DEFAULT_ALGORITHM", "PACK_ALGORITHMS"},  # the constant, and the names list
    "datatools.kernels.packing.algorithms": {"TABLE"},  # its row of the table
}
# the documented entry points that take a packing's options as keywords (and make a PackOptions at once)
PACKING_KEYWORD_ENTRIES = {
    "datatools.kernels.packing.plan.pack_lengths",
    "datatools.grain.packed_rows.PackedRowsMapDataset.__init__",
}
PACKING_KEYWORDS = {"algorithm", "max_segments", "align", "overflow"}


def docstrings(tree) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def functions(tree, prefix: str):
    """(qualified name, node) of every function and method of a module."""
    todo = [(prefix, node) for node in tree.body]
    while todo:
        where, node = todo.pop()
        if isinstance(node, ast.ClassDef):
            todo += [(f"{where}.{node.name}", child) for child in node.body]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{where}.{node.name}", node
            todo += [(f"{where}.{node.name}", child) for child in node.body]


def test_the_default_algorithm_is_written_once():
    """Every default packing algorithm (``pack_lengths``, ``PackOptions``, the config, ``--algorithm``, the
    analyzer's tie-break) is ``base.checks.DEFAULT_ALGORITHM``: its name appears in no string of datatools/ but
    that constant, the names list and the table's row (docstrings aside)."""
    found = []
    for name, tree in modules():
        homes = DEFAULT_ALGORITHM_HOMES.get(name, set())
        skip = docstrings(tree)
        for stmt in tree.body:
            targets = [t.id for t in getattr(stmt, "targets", [getattr(stmt, "target", None)]) if hasattr(t, "id")]
            if set(targets) & homes:
                continue
            for node in ast.walk(stmt):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                    if "best_fit_decreasing" in node.value:
                        found.append(f"{name}:{node.lineno}")
    assert found == []


def test_packing_options_travel_as_one_pack_options():
    """Below pipeline/ a packing's options are one ``PackOptions``: no function takes them as a dict
    (``options: dict``), none splats a config's ``**section.options``, and only the documented entry points
    (:data:`PACKING_KEYWORD_ENTRIES`) take algorithm, max_segments, align and overflow as keywords."""
    below = LAYERS.index("pipeline")
    found = []
    for name, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg is None and isinstance(kw.value, ast.Attribute) and kw.value.attr == "options":
                        found.append(f"{name}:{node.lineno}: **{ast.unparse(kw.value)}")
        if (layer_of(name) or 0) >= below:
            continue
        for qualified, fn in functions(tree, name):
            args = fn.args.args + fn.args.kwonlyargs
            for a in args:
                if a.arg in ("options", "opts") and a.annotation is not None and "dict" in ast.unparse(a.annotation):
                    found.append(f"{qualified}: {a.arg}: {ast.unparse(a.annotation)}")
            if PACKING_KEYWORDS <= {a.arg for a in args} and qualified not in PACKING_KEYWORD_ENTRIES:
                found.append(f"{qualified}: takes {', '.join(sorted(PACKING_KEYWORDS))}")
    assert found == []
    from datatools.kernels.packing import PackOptions
    from datatools.pipeline.config import PackingConfig

    assert isinstance(PackingConfig(ctx=64).options(), PackOptions)


# Rule 10: no leftovers. An exception type is raised somewhere; a config key is read somewhere.


def test_every_exception_type_of_base_errors_is_raised_somewhere():
    """A type of ``base/errors.py`` that no module makes (or subclasses) is a leftover (the exit status goes by
    type: a type nobody raises documents a status that never happens)."""
    found = dict(modules())
    declared = [n.name for n in found["datatools.base.errors"].body if isinstance(n, ast.ClassDef)]
    made = set()  # called (raised or returned to raise), or subclassed
    for name, tree in found.items():
        for node in ast.walk(tree) if name != "datatools.base.errors" else ():
            if isinstance(node, ast.Call):
                made.add(getattr(node.func, "id", getattr(node.func, "attr", None)))
            elif isinstance(node, ast.ClassDef):
                made |= {getattr(base, "id", getattr(base, "attr", None)) for base in node.bases}
    assert declared and [name for name in declared if name not in made] == []


def test_every_config_key_is_read_by_the_code():
    """Every field of every section of the pipeline config is read (``.key``, or ``getattr(x, "key")``) by some
    module: a key that does nothing is refused instead (``PipelineConfig.RETIRED_KEYS``)."""
    import dataclasses
    import inspect

    import datatools.pipeline.config as config

    read = set()
    for _, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                read.add(node.attr)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) > 1:
                read.add(getattr(node.args[1], "value", None))
    sections = [c for _, c in inspect.getmembers(config, dataclasses.is_dataclass) if c.__module__ == config.__name__]
    unread = [f"{c.__name__}.{f.name}" for c in sections for f in dataclasses.fields(c) if f.name not in read]
    assert sections and unread == []
    assert not set(config.PipelineConfig.RETIRED_KEYS) & {f.name for f in dataclasses.fields(config.PipelineConfig)}


# Rule 9: the tests mirror the package. A module has a test file named for it or an entry in tests/coverage_map.py.
TESTS = ROOT.parent / "tests"


def named_tests(path: Path) -> list[Path]:
    """The test files named for module ``path``: tests/<its folders>/test_<name>.py or test_<folder>_<name>.py (a
    package's ``__init__.py``: named for the package, beside its folder)."""
    rel = path.relative_to(ROOT)
    folder, name = TESTS / rel.parent, path.stem
    if name == "__init__":
        folder, name = TESTS / rel.parent.parent, rel.parent.name or "datatools"
    return [folder / f"test_{name}.py", folder / f"test_{folder.name}_{name}.py"]


def test_every_module_has_a_test_file_named_for_it_or_listed():
    """A module with no test file named for it is listed in tests/coverage_map.py with the test file that
    exercises it; a package ``__init__.py`` that defines no function or class needs neither. Every listed file
    exists, and the list holds no module that has gone or has gained a test file of its own."""
    from coverage_map import COVERED_BY

    missing, named = [], set()
    for path in sorted(ROOT.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        defines = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body)
        if path.name == "__init__.py" and not defines:
            continue
        if any(t.is_file() for t in named_tests(path)):
            named.add(name)
        elif name not in COVERED_BY:
            missing.append(name)
    assert missing == []
    assert [m for m, t in COVERED_BY.items() if not (ROOT.parent / t).is_file() or "/test_" not in t] == []
    assert sorted(set(COVERED_BY) - {m for m, _ in modules()}) == []  # a module gone
    assert sorted(set(COVERED_BY) & named) == []  # a module with a test file of its own now


# --------------------------------------------------------------------------- one way through each layer (issue 56)

STORED_ARRAYS = {"TokenStore": "datatools.io.formats.store", "LevanterCache": "datatools.io.formats.levanter_cache"}
READS = ("read", "read_async")  # the one way to read a token range (waiting, or in the background)


def test_stored_token_arrays_are_read_through_one_protocol(tmp_path):
    """``TokenStore`` and ``LevanterCache`` both implement ``io.token_array.TokenArray`` (checked by mypy: a function
    typed to take one is called with each), read a token range only through ``read`` / ``read_async`` (no
    ``store[i]``, no other ``read_*``), and no module but their own asks ``isinstance(x, TokenStore)``."""
    from datatools.io.formats.levanter_cache import LevanterCache
    from datatools.io.formats.store import TokenStore

    for cls in (TokenStore, LevanterCache):
        methods = [n for n, v in vars(cls).items() if inspect.isfunction(v)]
        extra = [n for n in methods if (n.startswith("read") and n not in READS) or n == "__getitem__"]
        assert extra == [], f"{cls.__name__}: entry points besides {READS}: {extra}"
    found = []
    for name, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass"):
                named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} if len(node.args) > 1 else ()
                found += [
                    f"{name}:{node.lineno}: {c}" for c in named if c in STORED_ARRAYS and STORED_ARRAYS[c] != name
                ]
    assert found == []
    snippet = tmp_path / "token_arrays.py"
    snippet.write_text(
        "from datatools.io.formats.levanter_cache import LevanterCache\n"
        "from datatools.io.formats.store import TokenStore\n"
        "from datatools.io.formats.token_array import TokenArray\n\n\ndef reads(array: TokenArray) -> None: ...\n\n\n"
        "def both(store: TokenStore, cache: LevanterCache) -> None:\n    reads(store)\n    reads(cache)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", str(snippet)],
        cwd=ROOT.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]


STORAGE = "datatools.io.storage"
# what code outside the storage module reaches of it: the one constructor and the class, its submodules, and (below)
# its public constants; the error it raises is base.errors' StorageError, re-exported
STORAGE_SURFACE = {"location", "Location", "atomic", "paths", "io_errors", "read_stats", "StorageError"}
STORAGE_OWN_TESTS = (
    "tests/io/test_storage.py",
    "tests/io/test_storage_timeouts.py",
    "tests/io/test_request_deadlines.py",
)


def _storage_uses(path: Path) -> list[str]:
    """Each name of the storage module one file reaches outside its surface (``storage.join``, ``from
    datatools.io.storage import read_bytes``), with its line."""
    tree = ast.parse(path.read_text(), str(path))
    aliases = {STORAGE}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "datatools.io":
            aliases |= {a.asname or a.name for a in node.names if a.name == "storage"}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == STORAGE and a.asname}
    reached = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == STORAGE:
            reached += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases:
            reached.append((node.lineno, node.attr))
    return [
        f"{path.relative_to(ROOT.parent)}:{line}: {name}"
        for line, name in reached
        if name not in STORAGE_SURFACE and not (name.isupper() and not name.startswith("_"))
    ]


def test_storage_has_one_surface():
    """``io/storage``'s one public surface is ``location(path)`` -> ``Location`` and its methods: the module defines
    no other public function or class, and no code outside it (``datatools/``, ``tests/``, ``benchmarks/``,
    ``scripts/``, ``clients/``) reaches another of its names (``storage.join(...)``, ``from datatools.io.storage
    import read_bytes``, ``storage._read_bytes(...)``) but its public constants and submodules; only the storage
    module's own tests reach its private names."""
    import datatools.io.storage as storage_module

    public = [n for n, v in vars(storage_module).items() if inspect.isfunction(v) or inspect.isclass(v)]
    assert sorted(n for n in public if not n.startswith("_") and vars(storage_module)[n].__module__ == STORAGE) == [
        "Location",
        "location",
    ]
    found = []
    for folder in ("datatools", "tests", "benchmarks", "scripts", "clients"):
        for path in sorted((ROOT.parent / folder).rglob("*.py")):
            if path == ROOT / "io" / "storage" / "__init__.py":
                continue
            own = str(path.relative_to(ROOT.parent)) in STORAGE_OWN_TESTS
            found += [u for u in _storage_uses(path) if not (own and u.rsplit(": ", 1)[1].startswith("_"))]
    assert found == []
    # the one local writer behind Location.write_*: no second way to write a file beside it
    import datatools.io.storage.atomic as atomic

    writers = sorted(n for n, v in vars(atomic).items() if inspect.isfunction(v) and "write" in n and n[0] != "_")
    assert writers == ["atomic_write_with"], writers
    callers = [
        str(p.relative_to(ROOT.parent))
        for p in sorted(ROOT.rglob("*.py"))
        if "atomic_write_with" in p.read_text() and p.parent != ROOT / "io" / "storage"
    ]
    assert callers == [], f"write through storage.location(path).write_*: {callers}"


# getattr(obj, "name", default) kept: none asks a document source, a schedule or a store what it can do.
GETATTR_ALLOWED = {
    ("datatools.pipeline.stalls", "close"),  # a Grain iterator (not every one has close)
    ("datatools.grain.portable_state", "close"),  # the same
    ("datatools.pipeline.schema", "check"),  # the validation machinery: a config section's own check hook
    ("datatools.integrations.maxtext_shim", None),  # a MaxText module's function, by name
    ("datatools.cli", "_releases"),  # a click callback's marker
    ("datatools.grain.worker_processes", "__file__"),  # the __main__ module
    ("datatools.grain.worker_processes", "__spec__"),
    ("datatools.grain.worker_processes", "name"),
    ("datatools.base.interrupts", "__code__"),  # gc callbacks
    ("datatools.io.formats.tokenizer", "encode_batch_fast"),  # tokenizers >= 0.21 (a third-party version)
    ("datatools.pipeline.schema", "RETIRED_KEYS"),  # a config section's retired keys (only some sections have any)
    ("datatools.io.sources.table_format", None),  # a text encoder's identity fields, by name: the lengths cache's key
    ("datatools.base.numba_cache", "_cache"),  # numba's dispatcher internals: its cache index file, if it has one
    ("datatools.base.numba_cache", "_cache_file"),
    ("datatools.base.numba_cache", "_index_path"),
}


def test_capabilities_are_declared_not_probed():
    """What the upper layers use of a document source, a schedule or a store is declared (``DocumentSource``'s
    attributes and methods with their defaults; a schedule's optional methods as runtime protocols in
    ``grain/schedule.py``): no ``getattr(x, "name", default)`` probes one (the few kept are listed, with why), and
    every class with ``lengths`` and ``read_pieces`` is a ``DocumentSource`` (one base class: no protocol, ABC and
    adapter beside it)."""
    found = []
    sources = {"DocumentSource"}
    readers = []
    for name, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) == 3:
                attr = node.args[1].value if isinstance(node.args[1], ast.Constant) else None
                if (name, attr) not in GETATTR_ALLOWED:
                    found.append(f"{name}:{node.lineno}: getattr({ast.unparse(node.args[0])}, {attr!r}, ...)")
            if isinstance(node, ast.ClassDef):
                methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
                bases = [ast.unparse(b) for b in node.bases]
                if {"read_pieces", "lengths"} <= methods and node.name != "DocumentSource":  # a source
                    readers.append((f"{name}.{node.name}", bases))
                if name == "datatools.io.sources.documents" and node.name != "DocumentSource":
                    assert not {"ABC", "Protocol"} & set(bases), f"{node.name}: a second source base class"
    assert found == []
    while True:  # the subclasses of DocumentSource, by name (every module's classes)
        more = {c.rsplit(".", 1)[1] for c, bases in readers if sources & set(bases)} - sources
        if not more:
            break
        sources |= more
    assert [c for c, bases in readers if not sources & set(bases)] == []
    from datatools.io.sources.documents import DocumentSource

    declared = {"in_memory", "reads_ahead", "prefetch", "forget_read_ahead", "pack_rows", "read_pieces", "lengths"}
    assert declared <= set(vars(DocumentSource)), declared - set(vars(DocumentSource))


VERSION_CHECKS = {"datatools.io.formats.store": {"read_manifest"}}  # where a token store's version may be compared


def test_one_token_store_version_is_read():
    """Only the version ``pretokenize`` writes is read: ``read_manifest`` compares a store's version (refusing an
    older one in one line naming the job that rewrites it); no other code branches on it (no reader for an older
    layout). Plan files (``io/formats/plan_file.py``) keep their own format version."""
    found = []
    for name, tree in modules():
        if name == "datatools.io.formats.plan_file":
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Compare) and any(
                    re.search(r"(\.version\b|\[.version.\]|get\(.version.)", ast.unparse(side))
                    for side in [node.left, *node.comparators]
                ):
                    if fn.name not in VERSION_CHECKS.get(name, ()):
                        found.append(f"{name}.{fn.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


# Rule 5 (issue 56): a new format is one module and one row of the format table.
FORMAT_TABLE = "datatools.io.sources.format_table"
FILE_KINDS_TABLE = "datatools.io.formats.discover"  # the kinds of table file: one FileKind class each, FILE_KINDS
TOKEN_INPUT_FIELDS = {  # what every input has; a format's own state is on its own objects (the store, the shards)
    "path": "the path given",
    "kind": "what it is, as reports record it",
    "format": "the row of FORMATS that read it",
    "nbytes": "bytes of input, for progress",
    "opened": "the format's own part (a FormatState), read by its own module alone",
}
TOKEN_INPUT_FORMAT_FIELDS: set[str] = set()  # per-format fields still on TokenInput: none (rule 5 done); stays empty


def test_a_format_is_one_module_and_one_table_row():
    """Every row of ``FORMATS`` takes ``detect``, ``lengths`` and ``documents`` (and any function it has) from one
    module of its own (``io/sources/NAME_format.py``), none from the table's module; ``open_input`` tries the rows
    alone (it names no format module: no special case before the table); no code compares a string with a format's
    or a file kind's name (``inp.kind == "store"``, ``shard.kind == "text"``, ``kind in ("parquet", ...)``) outside
    the two tables; ``TokenInput``'s fields are what every input has (those left are listed and may only shrink)."""
    import dataclasses

    from datatools.io.formats.discover import FILE_KINDS
    from datatools.io.formats.token_input import TokenInput
    from datatools.io.sources.format_table import FORMATS

    owners = {}
    for fmt in FORMATS:
        fns = [v for v in vars(fmt).values() if callable(v)]
        mods = {fn.__module__ for fn in fns}
        assert len(mods) == 1 and FORMAT_TABLE not in mods, f"{fmt.name}: its functions come from {sorted(mods)}"
        owners[fmt.name] = mods.pop()
    assert sorted(owners.values()) == sorted(set(owners.values())), f"two formats share a module: {owners}"
    assert [m for m in owners.values() if not m.endswith("_format")] == []
    names = {f.name for f in FORMATS} | {"table"} | set(FILE_KINDS)  # "table": the kind an ArrayRecord input reports
    found = []
    for name, tree in modules():
        layer = layer_of(name)
        if name in (FORMAT_TABLE, FILE_KINDS_TABLE) or layer is None or layer < LAYERS.index("io"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
            ):
                sides = [node.left, *node.comparators]
                consts = {c.value for side in sides for c in ast.walk(side) if isinstance(c, ast.Constant)}
                kinds = any(re.search(r"\bkind\b|\binp\w*\.format\b", ast.unparse(side)) for side in sides)
                if kinds and consts & names:
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
    tree = dict(modules())["datatools.io.sources.inputs"]
    imported = {
        alias.asname or alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    open_input = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "open_input")
    used = {n.id for n in ast.walk(open_input) if isinstance(n, ast.Name)}
    allowed = {"datatools.io.sources.format_table", "datatools.io.formats.token_input", "datatools.io"}
    special = sorted(
        n for n in used if n in imported and imported[n].startswith("datatools.io") and imported[n] not in allowed
    )
    assert special == [], f"open_input calls a format's module itself, besides the table: {special}"
    fields = {f.name for f in dataclasses.fields(TokenInput)}
    assert fields - set(TOKEN_INPUT_FIELDS) <= TOKEN_INPUT_FORMAT_FIELDS, fields - set(TOKEN_INPUT_FIELDS)
    assert TOKEN_INPUT_FORMAT_FIELDS <= fields, (
        f"gone from TokenInput: take off the list: {TOKEN_INPUT_FORMAT_FIELDS - fields}"
    )


IO_FLOORS = ["storage", "formats", "sources"]  # docs/architecture.md, "The io floors": from the bottom up


def io_floor_of(module: str) -> int | None:
    parts = module.split(".")
    return (
        IO_FLOORS.index(parts[2])
        if parts[:2] == ["datatools", "io"] and len(parts) > 2 and parts[2] in IO_FLOORS
        else None
    )


def test_io_floors_are_folders_and_imports_point_down_them():
    """``io/`` is three folders, storage, formats and sources, and a module imports only from its own floor and the
    ones below it (``from datatools.io import storage`` is an import of the storage floor). No module sits in
    ``io/`` outside a floor but ``io/__init__.py``, which re-exports the public names."""
    loose = sorted(p.name for p in (ROOT / "io").glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"modules outside the io floors: {loose}"
    wrong = []
    for name, tree in modules():
        mine = io_floor_of(name)
        if mine is None:
            continue
        for target, names in imports(tree):
            floors = (
                [io_floor_of(target)] if target != "datatools.io" else [io_floor_of(f"{target}.{n}") for n in names]
            )
            wrong += [f"{name} imports {target} {names}" for f in floors if f is not None and f > mine]
    assert wrong == []


# Rule 7 (issue 56): functions at most 60 lines and 8 parameters, outside numba and Pallas kernels and click commands'
# options. The functions still over are listed with their size today: each may only shrink, and leaves the list once
# it is within the rule; a function not listed must be within it.
MAX_LINES, MAX_PARAMETERS = 60, 8
OVER_SIZE: dict[str, tuple[int, int]] = {}  # module:function -> (lines, parameters) today


def _function_sizes():
    """(module:function, lines, parameters) of every function outside numba kernels (``@numba.njit``), Pallas
    kernels (``*_kernel`` in a ``*pallas*`` module: their parameters are the kernel's refs) and click commands
    (whose parameters are their options: their lines count, not their parameters)."""

    def functions(node, prefix=""):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}{child.name}", child
                yield from functions(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from functions(child, f"{prefix}{child.name}.")

    for name, tree in modules():
        for qualname, node in functions(tree):
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if any("jit" in d for d in decorators) or ("pallas" in name and node.name.endswith("_kernel")):
                continue
            a = node.args
            params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
            params -= 1 if a.args and a.args[0].arg in ("self", "cls") else 0
            params = 0 if any(d.startswith("click.") for d in decorators) else params
            yield f"{name}:{qualname}", node.end_lineno - node.lineno + 1, params


def test_functions_are_at_most_60_lines_and_8_parameters():
    grown, new, within = [], [], []
    for where, lines, params in _function_sizes():
        if where in OVER_SIZE:
            was_lines, was_params = OVER_SIZE[where]
            if lines > max(was_lines, MAX_LINES) or params > max(was_params, MAX_PARAMETERS):
                grown.append(f"{where}: {lines} lines, {params} parameters (was {was_lines}, {was_params})")
            if lines <= MAX_LINES and params <= MAX_PARAMETERS:
                within.append(where)
        elif lines > MAX_LINES or params > MAX_PARAMETERS:
            new.append(f"{where}: {lines} lines, {params} parameters")
    assert new == [], f"over {MAX_LINES} lines or {MAX_PARAMETERS} parameters (split it, or an options object)"
    assert grown == [], "a listed function grew"
    assert within == [], "within the rule now: take it off OVER_SIZE"


def test_fields_taken_by_name_are_typed_as_the_options_object():
    """Rule 7's options objects that a function also takes field by field (``pretokenize(..., eos=True)``,
    ``shuffle_report(n, io_block_size=64)``) type those keywords with a ``TypedDict`` holding exactly the object's
    fields and types (``**settings: Unpack[...]``), so mypy checks each keyword as it checks the field."""
    import dataclasses
    import typing

    from datatools.analysis import shuffle_quality
    from datatools.jobs import pretokenize

    pairs = [
        (pretokenize.pretokenize, "settings", pretokenize.PretokenizeOptions, pretokenize.PretokenizeSettings),
        (shuffle_quality.shuffle_report, "fields", shuffle_quality.ShuffleSettings, shuffle_quality.ShuffleFields),
    ]
    for function, kwargs, options, named in pairs:
        hints = typing.get_type_hints(function, include_extras=True)
        assert hints[kwargs] == typing.Unpack[named], f"{function.__name__}: **{kwargs} is {hints[kwargs]}"
        fields = {f.name for f in dataclasses.fields(options)}
        option_types = {k: v for k, v in typing.get_type_hints(options).items() if k in fields}
        assert typing.get_type_hints(named) == option_types, f"{named.__name__} differs from {options.__name__}"


# Rule 8 (issue 56): mypy is strict (pyproject.toml's [tool.mypy]) for every module but the kernels (numba's and
# Pallas' decorators and arrays are untyped) and the modules not yet annotated, listed here with their strict errors
# on the day the list was written: the list only shrinks (a module that passes strict leaves it, none joins it); both
# exceptions relax only the flags of RELAXED, and every function's body is checked everywhere (check_untyped_defs).
KERNEL_MODULES = ["datatools.kernels", "datatools.kernels.*", "datatools.train.attention_pallas"]
RELAXED = {
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "disallow_untyped_calls",
    "disallow_untyped_decorators",
    "disallow_any_generics",
    "disallow_subclassing_any",
    "warn_return_any",
}
NOT_YET_STRICT: set[str] = set()  # module  # strict errors when listed (none now: every module is strict)


def test_mypy_is_strict_but_for_the_kernels_and_a_shrinking_list():
    import tomllib

    mypy = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy.get("strict") is True and mypy.get("check_untyped_defs") is True
    assert [f for f in RELAXED if f in mypy] == [], "a strict flag set for every module"
    kernels, listed = [], []
    for override in mypy.get("overrides", []):
        flags = {k: v for k, v in override.items() if k != "module"}
        assert set(flags) <= RELAXED and not any(flags.values()), f"{override['module']}: relaxes {flags}"
        (kernels if override["module"] == KERNEL_MODULES else listed).extend(override["module"])
    assert kernels == KERNEL_MODULES, "the kernels' override is not one of its own"
    joined = sorted(set(listed) - set(NOT_YET_STRICT))
    assert joined == [], "not strict and not on NOT_YET_STRICT: annotate them instead"
    left = sorted(set(NOT_YET_STRICT) - set(listed))
    assert left == [], "strict now: take them off NOT_YET_STRICT"
    names = {name for name, _ in modules()}
    assert sorted(set(listed) - names) == [], "listed modules that are gone"


def test_no_any_at_a_protocol_seam():
    """Every ``Protocol`` class of ``datatools/`` and ``DocumentSource`` (what the layers above read documents
    through) type their methods whole, and no attribute or method of theirs is typed ``Any`` (rule 8)."""
    found = []
    for name, tree in modules():
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            bases = {ast.unparse(b) for b in cls.bases}
            if not ({"Protocol", "typing.Protocol"} & bases or cls.name == "DocumentSource"):
                continue
            for node in cls.body:
                where = f"{name}.{cls.name}"
                if isinstance(node, ast.AnnAssign) and "Any" in _names(node.annotation):
                    found.append(f"{where}.{ast.unparse(node.target)}: Any")
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                a = node.args
                args = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, [a.vararg, a.kwarg])]
                args = args[1:] if args and args[0].arg in ("self", "cls") else args
                untyped = [x.arg for x in args if x.annotation is None] + (["return"] if node.returns is None else [])
                typed_any = [x.arg for x in args if x.annotation is not None and "Any" in _names(x.annotation)]
                typed_any += ["return"] if node.returns is not None and "Any" in _names(node.returns) else []
                found += [f"{where}.{node.name}: {x} not typed" for x in untyped]
                found += [f"{where}.{node.name}: {x} typed Any" for x in typed_any]
    assert found == []


def _names(annotation: ast.expr) -> set[str]:
    """The names an annotation mentions (``typing.Any`` as ``Any``; a string annotation parsed)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    return {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)
    }
