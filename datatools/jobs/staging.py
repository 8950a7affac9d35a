"""Where a pre-tokenize job stages its shards and how it commits its store (:class:`Staging`), locally
(:class:`LocalStaging`: ``OUTPUT.partial``, then one rename; an ``--overwrite`` moves the old store to ``OUTPUT.old``
first) or in object storage (:class:`~datatools.jobs.object_store_commit.ObjectStoreStaging`: the manifest last).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from datatools.io import storage
from datatools.io.formats.store import is_token_store, read_manifest
from datatools.io.storage.paths import display, resolved
from datatools.jobs import object_store_commit

STAGING_NAMES = {"job.json", "shards", "store", "order.bin"}  # what a staging directory of this job holds


class Staging(Protocol):
    """A job's staging area: ``output`` (the store: a resolved path or a URL) and ``staging`` (``shards/NNNNNN.npz``
    and their pieces). A job calls :meth:`check_replaceable` (ValueError, before any work, unless all it would
    replace is datatools' own), then :meth:`clean` (the store is complete: remove what an interrupted run left) or
    :meth:`prepare` (keep the staging area of this job, remove another's), :meth:`present` (the shards written, the
    pieces of the others) and :meth:`commit` (put the store ``write(where)`` writes in place of OUTPUT, remove the
    staging area). ``extra`` gets a line for what was removed. Killed anywhere and run again, the job ends with the
    store an uninterrupted run writes."""

    @property
    def output(self) -> str | Path: ...
    @property
    def staging(self) -> str | Path: ...
    def check_replaceable(self, overwrite: bool) -> None: ...
    def clean(self, extra: dict[str, str]) -> None: ...
    def prepare(self, job: str, shards: int, extra: dict[str, str]) -> None: ...
    def present(self) -> tuple[set[int], dict[int, int]]: ...
    def commit(self, job: str, write: Callable[[str | Path], None], extra: dict[str, str]) -> None: ...


def open_staging(output: str | os.PathLike[str]) -> Staging:
    """The staging of a store at ``output``: in object storage for a URL, else beside the resolved path."""
    loc = storage.location(output)
    if loc.renames_atomically:
        return LocalStaging(resolved(output))
    return object_store_commit.ObjectStoreStaging(loc.text)


def fault(point: str) -> None:
    """Kill this process with SIGKILL when DATATOOLS_FAULT names this point (crash tests)."""
    if os.environ.get("DATATOOLS_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def manifest_reads(path: str | os.PathLike[str]) -> bool:
    """Whether the manifest at ``path`` (a directory or a URL) reads (else ``--overwrite`` replaces the store)."""
    try:
        read_manifest(path)
    except ValueError:
        return False
    return True


class LocalStaging:
    """A local job's store, its staging (``OUTPUT.partial``) and where an ``--overwrite`` swap moves the old store
    (``OUTPUT.old``), all beside the resolved output."""

    def __init__(self, output: Path):
        self.output = output
        self.staging = output.with_name(output.name + ".partial")
        self.old = output.with_name(output.name + ".old")
        self.old_left = False  # a store an interrupted --overwrite swap moved aside, found before any work

    def check_replaceable(self, overwrite: bool) -> None:
        """ValueError, before any work, when a path the job would write holds what is not datatools' own: OUTPUT
        must be absent, a token store or (``overwrite``) an empty directory; OUTPUT.partial a staging directory;
        OUTPUT.old a store."""
        output, staging, old = self.output, self.staging, self.old
        if output.exists() or output.is_symlink():
            if output.is_dir() and not output.is_symlink() and not any(output.iterdir()):
                if not overwrite:
                    raise ValueError(
                        f"{display(output)}: already exists (an empty directory); pass --overwrite to "
                        f"write the store in its place"
                    )
            elif _layout_only(output) and not manifest_reads(output):
                if not overwrite:  # a store whose manifest no longer reads: nothing but a store's files
                    raise ValueError(
                        f"{display(output)}: a token store whose manifest.json does not read; nothing was "
                        f"touched: pass --overwrite to rebuild it (it holds nothing but a store's files)"
                    )
            elif not (output.is_dir() and is_token_store(output) and manifest_reads(output)):
                what = "a file" if output.is_file() else "a directory" if output.is_dir() else "not a directory"
                raise ValueError(
                    f"{display(output)}: already exists and is not a datatools token store ({what} "
                    f"without a token store manifest); --overwrite replaces only a token store, so "
                    f"nothing was touched: move it away or choose another OUTPUT"
                )
            else:
                _check_only_store_files(output)
        if staging.exists() or staging.is_symlink():
            names = {p.name for p in staging.iterdir()} if staging.is_dir() and not staging.is_symlink() else None
            if names is None or not all(n in STAGING_NAMES or n.startswith(".job.json.") for n in names):
                raise ValueError(
                    f"{display(staging)}: exists and is not a pretokenize staging directory (it holds "
                    f"other files); nothing was touched: move it away or choose another OUTPUT"
                )
        if old.exists() or old.is_symlink():
            if not (old.is_dir() and not old.is_symlink() and is_token_store(old) and manifest_reads(old)):
                raise ValueError(
                    f"{display(old)}: exists and is not a token store an interrupted --overwrite set "
                    f"aside; nothing was touched: move it away or choose another OUTPUT"
                )
            _check_only_store_files(old)
        self.old_left = old.exists()

    def clean(self, extra: dict[str, str]) -> None:
        _clean_leftovers(self.output, extra, [p for p in (self.staging, self.old) if p.exists()])

    def prepare(self, job: str, shards: int, extra: dict[str, str]) -> None:
        self.output.parent.mkdir(parents=True, exist_ok=True)
        _check_disk(self.output.parent)
        job_file = self.staging / "job.json"
        if self.staging.exists():
            try:  # missing or garbled: a run killed before it wrote job.json (unreadable: an OSError, kept)
                same = json.loads(job_file.read_text()).get("job") == job
            except (FileNotFoundError, IsADirectoryError, ValueError, AttributeError):
                same = False
            if not same:
                shutil.rmtree(self.staging)  # datatools' own (check_replaceable): another job's run's staging
                extra["cleaned"] = (
                    f"{display(self.output)}: removed {display(self.staging.name)} left by an interrupted run "
                    f"of a different job"
                )
        (self.staging / "shards").mkdir(parents=True, exist_ok=True)
        if not job_file.exists():
            storage.location(job_file).write_text(json.dumps({"job": job, "shards": shards}) + "\n")

    def present(self) -> tuple[set[int], dict[int, int]]:
        return object_store_commit.written([f"shards/{n}" for n in os.listdir(self.staging / "shards")])

    def commit(self, job: str, write: Callable[[str | Path], None], extra: dict[str, str]) -> None:
        store_tmp, old = self.staging / "store", self.old
        if store_tmp.exists():
            shutil.rmtree(store_tmp)
        write(store_tmp)
        fault("before-rename")
        if self.output.exists():  # overwrite: move the old store aside, put the new one in, then delete the old
            if old.exists():
                shutil.rmtree(old)
            os.replace(self.output, old)
            fault("during-swap")
        os.replace(store_tmp, self.output)
        fault("after-rename")
        shutil.rmtree(self.staging)  # this run's own staging: removed without a word
        _clean_leftovers(self.output, extra, [old] if self.old_left and old.exists() else [])
        if old.exists():  # the store this run's --overwrite swap moved aside
            shutil.rmtree(old)


def _check_disk(path: Path) -> None:
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return
    if free < 1 << 20:
        raise OSError(28, f"No space left on device under {path}")


def _clean_leftovers(output: Path, extra: dict[str, str], removed: list[Path]) -> None:
    """Remove what an interrupted run left (checked to be datatools' own before any work) and say so."""
    for p in removed:
        shutil.rmtree(p)
    if removed:
        extra["cleaned"] = (
            f"{display(output)}: removed "
            + " and ".join(display(p.name) for p in removed)
            + " left by an interrupted run"
        )


def _store_files(store: Path) -> list[str]:
    """Every file (and link) in a store directory, relative, with ``/``."""
    files = []
    for root, dirs, names in os.walk(store):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            files.append(os.path.relpath(os.path.join(root, name), store).replace(os.sep, "/"))
    return files


def _layout_only(store: Path) -> bool:
    """Whether ``store`` is a directory (not a link) holding ``manifest.json`` and nothing but files of a store's
    layout (:data:`~datatools.jobs.object_store_commit.STORE_KEY`): a damaged store ``--overwrite`` may replace."""
    if not store.is_dir() or store.is_symlink() or not (store / "manifest.json").is_file():
        return False
    return not object_store_commit.foreign_keys(_store_files(store), None)


def _check_only_store_files(store: Path) -> None:
    """ValueError unless every file in the store directory is the store's own
    (:func:`~datatools.jobs.object_store_commit.foreign_keys`): a replacement deletes the directory."""
    foreign = object_store_commit.foreign_keys(_store_files(store), read_manifest(store))
    if foreign:
        raise ValueError(
            f"{display(store)}: holds files that are not the token store's own "
            f"({', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}); --overwrite replaces only the "
            f"store's own files, so nothing was touched: move them away or choose another OUTPUT"
        )
