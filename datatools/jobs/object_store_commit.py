"""Committing a pre-tokenize job's store to object storage (``s3://``, ``gs://``), where there is no rename.

Shards are one PUT each under ``STAGING/shards/`` (:func:`staging_of`). The commit writes ``STAGING/commit.json``
(the store keys under OUTPUT are now this job's), deletes an old store's manifest then its keys, writes the arrays
and ``OUTPUT/manifest.json`` last, then deletes STAGING: a reader sees the old store, none, or the whole new one.
Objects not provably datatools' own are never deleted: the job refuses them before any work.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from datatools.io import storage
from datatools.io.formats import shard_reads
from datatools.io.formats.store import ROOT_STAGING, is_token_store, read_manifest
from datatools.io.storage.paths import display

STAGING_FILE = re.compile(r"(job\.json|commit\.json|shards/\d{6}(\.piece-\d{6})?\.npz)")  # shards, their pieces
SHARD_FILE = re.compile(r"shards/(\d{6})(?:\.piece-(\d{6}))?\.npz")
STORE_KEY = re.compile(r"manifest\.json|shard_index\.bin|(tokens|offsets)/(zarr\.json|c(/\d+)+)")  # store.py's layout


def staging_of(output: str) -> str:
    """The staging prefix of a store at ``output``: ``OUTPUT.partial`` beside it, in the same bucket; for a
    bucket root ``OUTPUT/.partial`` under it (``bucket.partial`` would be another bucket)."""
    loc = storage.location(output)
    return loc.text.rstrip("/") + ("/" + ROOT_STAGING if not loc.key else ".partial")


def store_keys(manifest: dict[str, Any] | None) -> set[str] | None:
    """The keys (relative to the store) a store's manifest lists, ``manifest.json`` included; None for a manifest
    without records (a version-1 store)."""
    chunks = (manifest or {}).get("chunks")
    if not isinstance(chunks, dict):
        return None
    out = {"manifest.json", shard_reads.INDEX_KEY}  # the index: also before its record (a kill while it is added)
    for name in ("tokens", "offsets"):
        records = chunks.get(name)
        if isinstance(records, dict):
            out.update(f"{name}/{k}" for k in records)
    return out


def foreign_keys(names: list[str], manifest: dict[str, Any] | None) -> list[str]:
    """Of ``names`` (keys or files relative to a store), those that are not the store's own (see
    :func:`store_keys`; without a manifest, the keys of a store's layout)."""
    own = store_keys(manifest)
    return [n for n in names if (n not in own if own is not None else not STORE_KEY.fullmatch(n))]


def _names(prefix: str) -> list[str]:
    base = storage.location(prefix).text.rstrip("/") + "/"
    return [f[len(base) :] for f in storage.location(prefix).list()]


def _read_json(url: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        value = json.loads(storage.location(url).read_bytes())
    except (FileNotFoundError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


class ObjectStoreStaging:
    """The :class:`~datatools.jobs.staging.Staging` of a store in object storage (the module docstring)."""

    def __init__(self, output: str):
        self.output = output
        self.staging = staging_of(output)

    def check_replaceable(self, overwrite: bool) -> None:
        """ValueError, before any work, unless every object under ``OUTPUT/`` and STAGING is provably datatools'
        own: under OUTPUT the keys of the token store there (or, when ``STAGING/commit.json`` says a job was
        committing, keys of a store's layout); in STAGING a staging area's files. Nothing is touched."""
        output, staging = self.output, self.staging
        out = storage.location(output)
        inner = staging.startswith(out.text.rstrip("/") + "/")
        stage_rel = staging[len(out.text.rstrip("/")) + 1 :] + "/" if inner else None
        bad = [n for n in _names(staging) if not STAGING_FILE.fullmatch(n)]
        if bad:
            raise ValueError(
                f"{storage.location(staging).text}: holds objects that are not a pretokenize staging area "
                f"({bad[0]}{' ...' if len(bad) > 1 else ''}); nothing was touched: remove them or choose "
                f"another OUTPUT"
            )
        names = [n for n in _names(output) if not (stage_rel and n.startswith(stage_rel))]
        if not names:
            return
        manifest, store = None, is_token_store(output)
        if store:
            with contextlib.suppress(ValueError):
                manifest = read_manifest(output)
        if manifest is None and store and not foreign_keys(names, None):
            if overwrite:
                return  # a store whose manifest no longer reads: nothing but a store's keys, replaced by --overwrite
            raise ValueError(
                f"{out.text}: a token store whose manifest.json does not read; nothing was touched: "
                f"pass --overwrite to rebuild it (it holds nothing but a store's objects)"
            )
        if manifest is None and _read_json(storage.location(staging).join("commit.json")).get("job") is None:
            raise ValueError(
                f"{out.text}: already holds objects and is not a datatools token store (no "
                f"readable manifest.json; {names[0]}{' ...' if len(names) > 1 else ''}); --overwrite replaces "
                f"only a token store, so nothing was touched: remove them or choose another OUTPUT"
            )
        foreign = foreign_keys(names, manifest)
        if foreign:
            where = "the bucket root" if not out.key else "the store's prefix"
            raise ValueError(
                f"{out.text}: {where} holds objects that are not the token store's own "
                f"({', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}); --overwrite replaces only the "
                f"store's own objects, so nothing was touched: move them or choose another OUTPUT"
            )

    def clean(self, extra: dict[str, str]) -> None:
        _remove_own(self.staging, STAGING_FILE)

    def prepare(self, job: str, shards: int, extra: dict[str, str]) -> None:
        job_file = storage.location(self.staging).join("job.json")
        if _names(self.staging) and _read_json(job_file).get("job") != job:
            _remove_own(self.staging, STAGING_FILE)
            extra["cleaned"] = (
                f"{display(self.output)}: removed {display(self.staging)} left by an interrupted run of a different job"
            )
        if not job_file.exists():
            job_file.write_text(json.dumps({"job": job, "shards": shards}) + "\n")

    def present(self) -> tuple[set[int], dict[int, int]]:
        return written(_names(self.staging))

    def commit(self, job: str, write: Callable[[str], None], extra: dict[str, str]) -> None:
        output, staging = self.output, self.staging
        storage.location(staging).join("commit.json").write_text(
            json.dumps({"job": job, "output": storage.location(output).text}) + "\n"
        )
        storage.location(output).join("manifest.json").remove()  # uncommit first: no reader sees a half-replaced store
        _remove_own(output, STORE_KEY)  # the store's keys only (check_replaceable: nothing else is there)
        write(output)
        _remove_own(staging, STAGING_FILE)


def written(names: Iterable[str]) -> tuple[set[int], dict[int, int]]:
    """Of ``names`` (relative to a staging area; others ignored), the shard numbers written
    (``shards/NNNNNN.npz``) and per shard the number of consecutive pieces from 0 (``NNNNNN.piece-PPPPPP.npz``)."""
    shards: set[int] = set()
    found: dict[int, set[int]] = {}
    for m in map(SHARD_FILE.fullmatch, names):
        if m and m[2] is None:
            shards.add(int(m[1]))
        elif m:
            found.setdefault(int(m[1]), set()).add(int(m[2]))
    counts = {k: min(set(range(len(have) + 1)) - have) for k, have in found.items()}  # the first piece missing
    return shards, {k: n for k, n in counts.items() if n}


def _remove_own(prefix: str, own: re.Pattern[str]) -> None:
    """Delete the objects under ``prefix`` whose names (relative to it) ``own`` matches; anything else is kept."""
    base = storage.location(prefix).text.rstrip("/")
    for name in _names(prefix):
        if own.fullmatch(name):
            storage.location(f"{base}/{name}").remove()
