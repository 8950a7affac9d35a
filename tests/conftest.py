"""Shared fixtures: real text from the Python standard library and a tokenizer trained on it locally."""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path

import hypothesis
import pytest

from datatools.base.progress import PLAIN_LINE

# The lengths cache (datatools/io/formats/lengths_cache.py) of the whole run in a folder of its own, never the
# user's (the commands tests run in subprocesses inherit it); tests of the cache itself name their own.
os.environ["DATATOOLS_CACHE_DIR"] = _CACHE = tempfile.mkdtemp(prefix="datatools-test-cache-")
atexit.register(shutil.rmtree, _CACHE, True)

# Hypothesis profiles: `make test` runs `ci`, `make test-all` runs `all` (HYPOTHESIS_PROFILE, set in the Makefile);
# pytest run by hand runs `ci`. `ci`: each test's own examples, derandomized (the same examples on every machine and
# every run, so a failure in CI is the same failure here), no example database, no deadline (a loaded 2-core machine
# is slow, not wrong), a failing example printed as a blob to replay. `all`: EXAMPLES_FACTOR times each test's
# examples, random, to find what the fixed ones miss. A profile is loaded here, before the test modules are imported:
# their @settings(...) take what they do not name from it.
EXAMPLES_FACTOR = 5
hypothesis.settings.register_profile(
    "ci", max_examples=100, derandomize=True, database=None, deadline=None, print_blob=True
)
hypothesis.settings.register_profile(
    "all", max_examples=100 * EXAMPLES_FACTOR, derandomize=False, deadline=None, print_blob=True
)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
hypothesis.settings.load_profile(HYPOTHESIS_PROFILE)


# The suite's longest tests, grouped as they share fixtures, with their wall seconds in one `make test` on 2 busy
# cores (2026-11-30): each group starts first on some xdist worker (see _longest_first). Under --dist worksteal a
# worker first gets one contiguous part of the collection, and these sit late in it (tests/install,
# tests/test_newcomer_docs.py, tests/train): one that starts in the run's last minute holds a core alone at the end.
LONGEST_FIRST: tuple[tuple[str, float], ...] = (
    ("tests/train/test_train.py::", 165),  # ~15 tests, a JAX step compiled in each
    ("tests/test_newcomer_docs.py::test_every_block_of_the_page_runs_as_printed[README.md]", 93),
    ("tests/train/test_attention.py::", 110),
    ("tests/install/", 79),  # pip installs the wheel into a fresh venv
    ("tests/train/test_sharded_train.py::", 75),  # 8 JAX devices in a worker process
    ("tests/train/test_attention_kernels.py::", 80),
    ("tests/jobs/test_pretokenize_remote.py::", 43),
    ("tests/train/test_loss_weighting.py::", 37),  # 2 and 8 devices
    ("tests/jobs/test_pretokenize_interrupt.py::", 29),
    ("tests/integrations/test_maxtext_integration.py::", 25),
    ("tests/train/test_sharded_attention.py::", 23),
    ("tests/test_newcomer_docs.py::test_every_block_of_the_page_runs_as_printed[formats.md]", 23),
    ("tests/test_newcomer_docs.py::test_the_site_holds_the_key_reference", 23),  # a mkdocs build
)


def _longest_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put :data:`LONGEST_FIRST`'s groups at the heads of the xdist workers' first shares, longest to the least
    loaded worker (each group's tests together, in their order).

    pytest-xdist's ``worksteal`` (make test) hands worker ``i`` of ``n`` the ``i``-th contiguous part of the
    collection (``len // n`` tests, then of what is left), and an idle worker later takes the second half of the
    longest queue: so a long test at the head of a part starts at once, and the short ones at the tails move. The
    other tests keep their order (a module's tests stay together: its module fixtures are built once per worker).
    Every worker computes the same order, as xdist requires; without xdist there is one part."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    groups: list[list[pytest.Item]] = [[] for _ in LONGEST_FIRST]
    rest: list[pytest.Item] = []
    for item in items:
        group = next((g for g, (prefix, _) in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)), None)
        (rest if group is None else groups[group]).append(item)
    parts: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for g in sorted(range(len(groups)), key=lambda g: -LONGEST_FIRST[g][1]):
        if groups[g]:
            w = load.index(min(load))
            parts[w].extend(groups[g])
            load[w] += LONGEST_FIRST[g][1]
    left = len(items)
    for w, part in enumerate(parts):  # filled to the sizes worksteal's first split gives each worker
        size = left // (workers - w)
        left -= size
        take = max(0, size - len(part))
        part.extend(rest[:take])
        del rest[:take]
    parts[-1].extend(rest)
    items[:] = [item for part in parts for item in part]


@pytest.hookimpl(trylast=True)  # after `-m` deselects: the parts are sized on what runs
def pytest_collection_modifyitems(config, items) -> None:
    _longest_first(config, items)
    _scale_examples(items)


def _scale_examples(items: list[pytest.Item]) -> None:
    """Under the ``all`` profile, a test that names its own ``max_examples`` runs ``EXAMPLES_FACTOR`` times as many
    (a test that names none already has the profile's 5 x 100). Hypothesis keeps a test's settings on its function;
    should a release move them, this stops the run with the reason rather than run the usual counts unnoticed."""
    if HYPOTHESIS_PROFILE != "all":
        return
    profile = hypothesis.settings.get_profile("all").max_examples
    scaled: set[int] = set()
    for item in items:
        test = getattr(item, "obj", None)
        if not getattr(test, "is_hypothesis_test", False) or id(test) in scaled:
            continue
        scaled.add(id(test))  # parametrized copies of a test share its function: scaled once
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if not isinstance(own, hypothesis.settings):
            raise pytest.UsageError(f"{item.nodeid}: no hypothesis settings found on the test to scale")
        if own.max_examples != profile:
            scaled_settings = hypothesis.settings(own, max_examples=own.max_examples * EXAMPLES_FACTOR)
            test._hypothesis_internal_use_settings = scaled_settings  # type: ignore[union-attr]


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """A folder ``build`` fills once a run, for a costly module fixture (a worker process on 8 devices, 4 jax
    processes). Under xdist the first worker to ask builds it in the run's shared temporary folder while the others
    wait on a lock, then every worker reads it: a module fixture alone runs again on each worker that gets one of the
    module's tests (15-20 s of CPU each time)."""
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    root = tmp_path_factory.getbasetemp().parent if shared else tmp_path_factory.getbasetemp()
    work = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (work / ".built").exists():
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            build(work)
            (work / ".built").touch()
    return work


def stdlib_texts(count: int = 40) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))[:count]
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return stdlib_texts()


PROGRESS_LINE = PLAIN_LINE  # base/progress.py's plain lines


def without_progress(err: str) -> str:
    """``err`` without the progress lines a command prints off a terminal once it has run a quarter second (what
    it is doing, bars; each ends with its elapsed time): what is left is what the command said."""
    return "".join(line for line in err.splitlines(keepends=True) if not PROGRESS_LINE.fullmatch(line.rstrip("\n")))


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory, texts) -> Path:
    """A small byte-level BPE (lossless: decode(encode(x)) == x), trained on stdlib sources."""
    from datatools.jobs.demo_data import train_tokenizer

    return train_tokenizer(texts, tmp_path_factory.mktemp("tok") / "tokenizer.json", vocab_size=1000)


@pytest.fixture(scope="session")
def spm_model(tmp_path_factory):
    """A 200-piece SentencePiece BPE model (MaxText's usual tokenizer_path) trained offline on the README's
    non-empty lines, and those lines."""
    spm = pytest.importorskip("sentencepiece")
    d = tmp_path_factory.mktemp("spm")
    lines = [ln for ln in open("README.md", encoding="utf-8").read().splitlines() if ln.strip()]
    (d / "corpus.txt").write_text("\n".join(lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(d / "corpus.txt"), model_prefix=str(d / "tok"), vocab_size=200, model_type="bpe", minloglevel=2
    )
    return d / "tok.model", lines


def write_test_store(path, docs, vocab_size: int = 1 << 16):
    """A token store holding ``docs`` (lists/arrays of ids), written directly (no tokenizer)."""
    import numpy as np

    from datatools.io.formats.store import token_dtype, write_store

    dtype = token_dtype(vocab_size)
    lengths = np.array([len(d) for d in docs], np.int64)
    flat = np.concatenate([np.asarray(d, dtype) for d in docs]) if docs else np.zeros(0, dtype)
    write_store(
        path,
        [(flat, lengths)],
        num_tokens=int(lengths.sum()),
        num_documents=len(docs),
        dtype=dtype,
        manifest={"vocab_size": vocab_size},
    )
    return path


def store_document(store, i: int):
    """Document ``i`` of a token store or a Levanter cache (a stored token array): its token range, read."""
    if not -len(store) <= i < len(store):
        raise IndexError(f"document {i} out of range for {len(store)} documents")
    off = store.offsets
    return store.read(int(off[i % len(store)]), int(off[i % len(store) + 1]))


def store_documents(store, start: int, stop: int):
    """Documents ``[start, stop)`` of a stored token array in one read: (flat tokens, offsets relative to them)."""
    off = store.offsets[start : stop + 1]
    return store.read(int(off[0]), int(off[-1])), off - off[0]


def random_docs(n: int, seed: int = 0, mean_log: float = 4.5, max_len: int = 3000, vocab: int = 1000):
    """``n`` documents of lognormal lengths (1..max_len tokens) with ids in [2, vocab)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(mean_log, 0.9, n), 1, max_len).astype(int)
    return [rng.integers(2, vocab, k).astype(np.int32) for k in lengths]


@pytest.fixture()
def small_tmpfs(tmp_path):
    """A 2 MiB tmpfs mounted under tmp_path (a real full disk); skipped where mounting is not allowed."""
    import subprocess

    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=20)


# S3 and GCS servers on loopback (session) behind latency proxies, a fresh bucket per test, the same test on
# local / s3 / gs, and a bucket behind a test's own proxy (slow_s3, slow_gcs: latency, rate cap, counters)
from object_storage import (  # noqa: E402,F401
    gcs_bucket,
    gcs_proxy,
    gcs_server,
    s3_bucket,
    s3_proxy,
    s3_server,
    slow_gcs,
    slow_s3,
    storage_root,
)
