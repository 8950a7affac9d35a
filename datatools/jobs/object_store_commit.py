"""Committing a pre-tokenize job's store to object storage (``s3://``, ``gs://``), where there is no rename.

Locally the job builds the store in ``OUTPUT.partial/store`` and renames it into place.
An object store has no rename, so the commit point is the store's manifest instead
(``OUTPUT = s3://bucket/prefix``, ``STAGING = OUTPUT.partial``):

1. Shards: ``STAGING/shards/NNNNNN.npz``, each written in one PUT (complete or absent),
   and ``STAGING/job.json`` naming the job, as locally.
2. Commit: ``STAGING/commit.json`` is written first, naming the job and OUTPUT: from
   then on the objects under ``OUTPUT/`` are this job's to replace. A store already at
   OUTPUT (``--overwrite``) is uncommitted (its manifest deleted first), every object
   under ``OUTPUT/`` is deleted, the arrays are written, and ``OUTPUT/manifest.json``
   last. A reader opens a store only through its manifest, so it sees the old store, no
   store, or the whole new one, never a part.
3. STAGING is deleted.

A job killed anywhere and run again skips the shards already there; ``commit.json``
tells it that objects under OUTPUT without a manifest are its own half-written commit,
which it deletes and writes again, so the store ends byte-identical to an uninterrupted
run. Objects it cannot prove are its own are never deleted: a prefix holding anything
else is refused before any work. Only keys under ``OUTPUT/`` and ``STAGING/`` are ever
listed or deleted, one key at a time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from datatools.io import storage
from datatools.io.store import is_token_store, read_manifest

STAGING_FILE = re.compile(r"(job\.json|commit\.json|shards/\d{6}\.npz)")


def _names(prefix: str) -> list[str]:
    base = storage.url_of(prefix).rstrip("/") + "/"
    return [f[len(base) :] for f in storage.list_files(prefix)]


def _read_json(url: str) -> dict:
    try:
        value = json.loads(storage.read_bytes(url))
    except (FileNotFoundError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def committing_job(staging: str) -> str | None:
    """The job whose commit to OUTPUT was under way when it was interrupted (``STAGING/commit.json``), if any."""
    return _read_json(storage.join(staging, "commit.json")).get("job")


def check_replaceable(output: str, staging: str, overwrite: bool) -> None:
    """ValueError, before any work, unless every object under ``OUTPUT/`` and ``STAGING/`` is provably
    datatools' own: OUTPUT a token store (its manifest reads) or the half-written commit of an interrupted job
    (``STAGING/commit.json`` says so); STAGING only a staging area's files. Nothing is touched here."""
    bad = [n for n in _names(staging) if not STAGING_FILE.fullmatch(n)]
    if bad:
        raise ValueError(
            f"{storage.url_of(staging)}: holds objects that are not a pretokenize staging area "
            f"({bad[0]}{' ...' if len(bad) > 1 else ''}); nothing was touched: remove them or choose "
            f"another OUTPUT"
        )
    if not storage.list_files(output):
        return
    if is_token_store(output):
        try:
            read_manifest(output)
            return
        except ValueError:
            pass
    if committing_job(staging) is None:
        raise ValueError(
            f"{storage.url_of(output)}: already holds objects and is not a datatools token store (no "
            f"readable manifest.json); --overwrite replaces only a token store, so nothing was touched: "
            f"remove them or choose another OUTPUT"
        )


def prepare_staging(staging: str, job: str, shards: int) -> bool:
    """Make STAGING this job's: keep it when its ``job.json`` names ``job``, else delete what another job left
    (checked to be a staging area by :func:`check_replaceable`). Returns whether another job's files went."""
    job_file = storage.join(staging, "job.json")
    names = _names(staging)
    removed = False
    if names and _read_json(job_file).get("job") != job:
        storage.remove_tree(staging)
        removed = True
    if not storage.exists(job_file):
        storage.write_text(job_file, json.dumps({"job": job, "shards": shards}) + "\n")
    return removed


def shards_present(staging: str) -> set[int]:
    """The shard numbers already written under ``STAGING/shards/`` (one listing)."""
    return {int(n[7:13]) for n in _names(staging) if re.fullmatch(r"shards/\d{6}\.npz", n)}


def commit(output: str, staging: str, job: str, write: Callable[[str], None]) -> None:
    """Write the store at OUTPUT with ``write(output)`` (arrays, then the manifest last), replacing what is
    there, under the protocol of the module docstring; then delete STAGING."""
    storage.write_text(
        storage.join(staging, "commit.json"), json.dumps({"job": job, "output": storage.url_of(output)}) + "\n"
    )
    storage.remove(storage.join(output, "manifest.json"))  # uncommit first: no reader opens a half-replaced store
    storage.remove_tree(output)
    write(output)
    storage.remove_tree(staging)
