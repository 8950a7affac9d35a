"""The pre-tokenize job: text in, a token store out, on a local process pool or on Ray Data.

The job's identity hashes the input files' versions, the tokenizer and the options. Each shard is written to
``OUTPUT.partial/shards/NNNNNN.npz`` (complete or absent), then the store is committed (:mod:`datatools.jobs.staging`).
Killed anywhere and run again, the job skips the shards written and ends with the store an uninterrupted run writes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVarTuple, Unpack

import numpy as np
import numpy.typing as npt

from datatools.base import interrupts
from datatools.base.checks import ENGINES, short_repr
from datatools.base.install import missing
from datatools.base.progress import doing, job_progress, say
from datatools.io import storage
from datatools.io.formats.discover import Shard
from datatools.io.formats.sentencepiece_encoder import SentencePieceEncoder
from datatools.io.formats.shard_reads import INDEX_KEY
from datatools.io.formats.store import (
    TokenStore,
    add_shard_index,
    is_token_store,
    lacks_shard_index,
    read_manifest,
    token_dtype,
    write_store,
)
from datatools.io.formats.store_verify import IndexDamage, verify_store
from datatools.io.formats.tables import check_column, shard_bytes, shard_texts
from datatools.io.formats.tokenizer import TextEncoder
from datatools.io.sources.inputs import InputOptions, TokenInput, open_input
from datatools.io.storage.paths import display
from datatools.jobs.staging import Staging, fault, manifest_reads, open_staging
from datatools.jobs.write_order import SPILL_NAME, shuffled_shards, write_order_record

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

PIECE_TOKENS = 1 << 20  # a shard's tokens are committed in pieces of about this many tokens ...
PIECE_SECONDS = 10.0  # ... or this many seconds of work, whichever comes first: what a kill may lose, per worker
ENCODE_CHARS = 1 << 22  # characters of text per tokenizer call (and progress report) within a shard

Ts = TypeVarTuple("Ts")
# an input file's content version (Location.stamp): path, bytes, and mtime_ns or version (ETag / generation, bytes)
Stamp = dict[str, str | int | tuple[int | str, int] | None]
Report = Callable[[int, int, int, int], None]  # report(k, documents, tokens, characters) after each run of shard k
Task = tuple[Shard, int, str, int]  # (shard, k, staging, pieces committed): one pool worker's shard


class Finished(Protocol):
    """``finished(k, documents, tokens)``: shard ``k`` is done (its documents and tokens not yet reported)."""

    def __call__(self, k: int, docs: int = 0, tokens: int = 0) -> None: ...


@dataclass(frozen=True)
class JobOptions:
    """What decides the store's content (everything but where and how fast)."""

    column: str = "text"
    bos_id: int | None = None
    eos_id: int | None = None
    ctx: int | None = None
    tile: int | None = None
    tokenizer_settings: str = "off"
    shuffle_seed: int | None = None  # None: the input's order; else a seeded random order of every document

    def record(self) -> dict[str, int | str | None]:
        """The options as the job's identity and the manifest keep them (``shuffle_seed`` only when set, so a
        store written before the option existed is still this job's)."""
        options = asdict(self)
        if options["shuffle_seed"] is None:
            del options["shuffle_seed"]
        return options


@dataclass
class JobResult:
    """What :func:`pretokenize` did: the store written (its documents and tokens), shards written and resumed, the
    seconds it took, its ``status`` and ``extra``: the lines it reports (the tokenizer, repairs, clean-ups)."""

    output: str
    documents: int
    tokens: int
    shards: int
    shards_resumed: int
    seconds: float
    status: str  # "written", "resumed", "already complete"
    extra: dict[str, str] = field(default_factory=dict)
    documents_resumed: int = 0  # documents of unfinished shards an interrupted run had committed in pieces


class ShardTokenizer:
    """Tokenizes one shard into (tokens, lengths), a bounded batch of texts at a time; picklable."""

    def __init__(self, encoder: TextEncoder | SentencePieceEncoder, options: JobOptions):
        self.encoder = encoder
        self.options = options
        self.dtype = token_dtype(encoder.vocab_size)

    def batches(self, shard: Shard, skip: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray, int, int]]:
        """``(tokens, lengths, documents, characters)`` of successive runs of the shard's documents past the first
        ``skip``, at most :data:`ENCODE_CHARS` characters a run (one document may be longer)."""
        o = self.options
        for texts in shard_texts(shard, o.column):
            if skip:
                drop = min(skip, len(texts))
                texts, skip = texts[drop:], skip - drop
            start = 0
            while start < len(texts):
                stop, chars = start, 0
                while stop < len(texts) and (stop == start or chars + len(texts[stop]) <= ENCODE_CHARS):
                    chars += len(texts[stop])
                    stop += 1
                t, n = self.encoder.encode(texts[start:stop], self.dtype)
                yield t, _windows(n, o.ctx) if o.ctx else n, stop - start, chars
                start = stop


def _windows(lengths: np.ndarray, ctx: int) -> np.ndarray:
    """The lengths of documents longer than ``ctx`` split into consecutive windows of ``ctx`` tokens, the last one
    what is left (:func:`~datatools.kernels.tiles.chunk`'s windows; the tokens stay as they are)."""
    counts = np.maximum(-(-lengths // ctx), 1)
    out = np.full(int(counts.sum()), ctx, np.int64)
    out[np.cumsum(counts) - 1] = lengths - (counts - 1) * ctx
    return out


def _shard_path(staging: str | Path, k: int, piece: int | None = None) -> str | Path:
    """``STAGING/shards/NNNNNN.npz``, or its piece ``NNNNNN.piece-PPPPPP.npz`` (a run of its documents)."""
    return (
        storage.location(staging)
        .join("shards", f"{k:06d}.npz" if piece is None else f"{k:06d}.piece-{piece:06d}.npz")
        .path
    )


def _write_shard(path: str | Path, tokens: np.ndarray, lengths: np.ndarray) -> None:
    """Complete or absent: locally a temporary file and a rename, in object storage one PUT."""
    storage.location(path).write_with(lambda f: np.savez(f, tokens=tokens, lengths=lengths))


def _read(path: str | Path, *keys: str) -> tuple[np.ndarray, ...]:
    """The arrays ``keys`` of a shard or piece file, in one read (in a bucket: one GET)."""
    with np.load(io.BytesIO(storage.location(path).read_bytes()), allow_pickle=False) as z:
        return tuple(z[key] for key in keys)


def _write_piece(path: str | Path, tokens: np.ndarray, lengths: np.ndarray, documents: int) -> None:
    """A shard file that also holds its number of documents (with ``ctx`` a document may give several lengths)."""
    storage.location(path).write_with(
        lambda f: np.savez(f, tokens=tokens, lengths=lengths, documents=np.int64(documents))
    )


def _naming(path: str | Path, write: Callable[[str | Path, *Ts], None], *args: *Ts) -> None:
    """``write(path, *args)``, an OSError naming ``path`` (a full disk names the file it could not write)."""
    try:
        write(path, *args)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None


def _run_shard(
    worker: ShardTokenizer, shard: Shard, k: int, staging: str | Path, pieces: int, report: Report | None = None
) -> tuple[int, int, int, int]:
    """Worker body (both engines): tokenize shard k, committing pieces as it goes (:data:`PIECE_TOKENS` /
    :data:`PIECE_SECONDS`; the ``pieces`` an interrupted run left are skipped), then join them into the shard file.
    Returns (k, docs, tokens, documents resumed from pieces); ``report(k, documents, tokens, characters)`` after
    each run."""
    skip = sum(int(_read(_shard_path(staging, k, p), "documents")[0]) for p in range(pieces))
    tokens: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    docs = held = 0
    last = time.monotonic()
    for t, n, d, chars in worker.batches(shard, skip):
        tokens.append(t)
        lengths.append(n)
        docs += d
        held += int(t.size)
        if report is not None:
            report(k, d, int(t.size), chars)
        if held >= PIECE_TOKENS or time.monotonic() - last >= PIECE_SECONDS:
            path = _shard_path(staging, k, pieces)
            _naming(path, _write_piece, _joined(tokens, worker.dtype), _joined(lengths, np.int64), docs)
            fault(f"after-piece-{k}-{pieces}")
            pieces += 1
            tokens, lengths, docs, held, last = [], [], 0, 0, time.monotonic()
    if pieces:  # the committed pieces first, then what is held
        before = [_read(_shard_path(staging, k, p), "tokens", "lengths") for p in range(pieces)]
        tokens = [b[0] for b in before] + tokens
        lengths = [b[1] for b in before] + lengths
    flat, lens = _joined(tokens, worker.dtype), _joined(lengths, np.int64)
    _naming(_shard_path(staging, k), _write_shard, flat, lens)
    for p in range(pieces):
        storage.location(_shard_path(staging, k, p)).remove()
    return k, int(lens.shape[0]), int(flat.size), skip


def _joined(parts: list[np.ndarray], dtype: npt.DTypeLike) -> np.ndarray:
    """``parts`` back to back; one part is returned as it is (a 50 MB document's 37 M tokens are not copied)."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


_WORKER: ShardTokenizer | None = None
_REPORTS: Queue[tuple[int, int, int, int]] | None = None  # (k, documents, tokens, characters), in pool workers


def _init_pool(worker: ShardTokenizer, reports: Queue[tuple[int, int, int, int]] | None) -> None:
    """A pool worker's start: Ctrl-C is the parent's to handle, never a worker's traceback."""
    global _WORKER, _REPORTS
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER, _REPORTS = worker, reports


def _run_in_pool(args: Task) -> tuple[int, int, int, int]:
    """A pool worker's shard (:func:`_run_shard`), its progress reported through the pool's queue."""
    shard, k, staging, pieces = args
    reports = _REPORTS
    assert _WORKER is not None  # set by _init_pool, in every pool worker
    return _run_shard(_WORKER, shard, k, staging, pieces, None if reports is None else lambda *item: reports.put(item))


def _fingerprint(shards: list[Shard], tokenizer_sha: str, options: JobOptions) -> tuple[str, list[Stamp]]:
    """The job's identity (a SHA-256 of the input files' versions, the shards, the tokenizer and the options) and
    the input files' versions."""
    sources = [storage.location(f).stamp() for f in dict.fromkeys(f for s in shards for f in s.files)]
    parts = [[s.kind, s.part, s.stop] for s in shards]
    blob = json.dumps(
        {"sources": sources, "parts": parts, "tokenizer": tokenizer_sha, "options": options.record(), "v": 2},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest(), sources


@dataclass(frozen=True)
class PretokenizeOptions:
    """The pre-tokenize job's options, as :func:`pretokenize` takes them (an object, or its fields by name): what
    goes into the store, as given (the text column, the tokens around each document, windows of ``ctx``, the
    tokenizer's settings, the write order; :class:`JobOptions` is what they resolve to), then how the job runs.

    Attributes:
      bos, eos: a token before / after every document: a name, an id, ``"auto"`` (or True), or None.
      ctx, tile: with ctx, documents longer than ctx split into windows (ctx a multiple of tile).
      tokenizer_settings: ``off`` switches a JSON file's truncation, padding and template's special tokens off,
        ``keep`` keeps them.
      shuffle_seed: None writes the documents in the input's order; an integer (0 to 2**64 - 1) writes every
        stored document (a window, with ctx) of all inputs in that seed's random order
        (:mod:`datatools.jobs.write_order`); the manifest's ``write_order`` records which.
      workers: tokenizer processes (local) or Ray tasks in flight; ``ray_address``: None starts a local Ray.
      overwrite: replace a store of a different job; a store of this job is checked, as without it.
      check: kept for callers; a store of this job already there is always checked as ``datatools verify`` checks
        it (:func:`store_damage`: every byte read back) before it is called complete; a damaged one is repaired
        (``shard_index.bin`` alone rewritten from the chunks, anything else rebuilt by this run).
    """

    column: str = "text"
    bos: bool | str | int | None = None
    eos: bool | str | int | None = None
    ctx: int | None = None
    tile: int | None = None
    tokenizer_settings: str = "off"
    shuffle_seed: int | None = None
    workers: int = 1
    engine: str = "local"
    ray_address: str | None = None
    overwrite: bool = False
    check: bool = False
    progress: bool = True

    def checked(self) -> PretokenizeOptions:
        """These options, ValueError naming the first out of range (before any work); with ``ctx`` and no
        ``tile``, ``tile`` 1."""
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {short_repr(self.engine)}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        ctx, tile = self.ctx, self.tile
        if ctx is not None:
            tile = tile or 1
            if ctx < 1 or tile < 1 or ctx % tile:
                raise ValueError(f"--ctx {ctx} must be a positive multiple of --tile {tile}")
        elif tile is not None:
            raise ValueError("--tile needs --ctx")
        seed = self.shuffle_seed
        if seed is not None and not (isinstance(seed, int) and 0 <= seed < 1 << 64):
            raise ValueError(f"shuffle_seed must be an integer from 0 to 2**64 - 1; got {short_repr(seed)}")
        return replace(self, tile=tile)


@dataclass
class _Job:
    """A job resolved from its inputs, before any store is looked at: its shards (each once), the tokenizer, the
    options that decide the store's content, its identity (``key``: :func:`_fingerprint`) and the input files'
    versions it hashes, the worker that tokenizes a shard, and ``extra``: the lines the job reports (the
    tokenizer, files given twice)."""

    shards: list[Shard]
    encoder: TextEncoder | SentencePieceEncoder
    options: JobOptions
    key: str
    sources: list[Stamp]
    worker: ShardTokenizer
    extra: dict[str, str]


class PretokenizeSettings(TypedDict, total=False):
    """:class:`PretokenizeOptions`' fields by name, as :func:`pretokenize` takes them (``eos=True, workers=4``):
    typed one by one, so a caller's keyword is checked like the object's field (a test keeps the two equal)."""

    column: str
    bos: bool | str | int | None
    eos: bool | str | int | None
    ctx: int | None
    tile: int | None
    tokenizer_settings: str
    shuffle_seed: int | None
    workers: int
    engine: str
    ray_address: str | None
    overwrite: bool
    check: bool
    progress: bool


def pretokenize(
    inputs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    tokenizer: str | os.PathLike[str],
    *,
    options: PretokenizeOptions | None = None,
    **settings: Unpack[PretokenizeSettings],
) -> JobResult:
    """Tokenize text files into a token store at ``output`` (see the module docstring).

    Args:
      inputs: a path or list of paths, each one ``analyze-padding`` and a pipeline take (resolved by
        :func:`~datatools.io.sources.inputs.open_input`): Parquet, JSON Lines, Arrow IPC, Hugging Face ``save_to_disk``
        directories, ArrayRecord files, directories of these, a glob or comma list of files; and ``.txt`` files.
      tokenizer: a Hugging Face ``tokenizers`` JSON file or a SentencePiece model.
      options: the job's options (:class:`PretokenizeOptions`; default: its defaults).
      settings: any of :class:`PretokenizeOptions`' fields by name, over ``options``
        (``pretokenize(inputs, output, tokenizer, eos=True, workers=4)``); another name is a TypeError.

    Raises:
      ValueError: bad input or options, an output of another job without ``overwrite``, an OUTPUT (or
        OUTPUT.partial / OUTPUT.old) that is not datatools' own (never replaced).
      ModuleNotFoundError: ``engine="ray"`` without Ray installed (before anything is created).
      OSError: the disk is full (nothing incomplete is committed).
    """
    t0 = time.perf_counter()
    o = replace(options or PretokenizeOptions(), **settings)
    paths = _input_paths(inputs)
    stage = open_staging(output)  # local, or object storage: no rename there, the manifest is the commit point
    o = o.checked()
    require_engine(o.engine)
    stage.check_replaceable(o.overwrite)  # before any work: what is there is ours
    job = _resolve(paths, tokenizer, o)
    if o.progress:  # the inputs are checked: said first, before the run spends time tokenizing with it
        say(job.extra["tokenizer"])
    done = _existing_store(stage, job, o.overwrite, t0)
    if done is not None:
        return done
    count = len(job.shards)
    stage.prepare(job.key, count, job.extra)
    present, pieces = stage.present()
    todo = [k for k in range(count) if k not in present]
    docs_resumed = _tokenize_shards(job.worker, job.shards, todo, pieces, stage.staging, o)
    num_docs, num_tokens = _commit_store(stage, job)
    resumed = count - len(todo)
    return JobResult(
        display(stage.output),
        num_docs,
        num_tokens,
        count,
        resumed,
        time.perf_counter() - t0,
        "resumed" if resumed or docs_resumed else "written",
        job.extra,
        docs_resumed,
    )


def _input_paths(inputs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str | Path]:
    """``inputs`` (a path, or a list of paths) as a list of resolved paths; ValueError for none, or an empty one."""
    given: list[str | os.PathLike[str]] = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    if any(os.fspath(p) == "" for p in given):  # Path("") is ".": it would read the working directory
        raise ValueError("an input path is empty ('')")
    paths = [storage.location(p).path for p in given]
    if not paths:
        raise ValueError("no inputs given")
    return paths


def _resolve(paths: list[str | Path], tokenizer: str | os.PathLike[str], o: PretokenizeOptions) -> _Job:
    """The inputs opened with the tokenizer (the same file and options for every input), their shards each once
    with the text column checked in one shard of each file, and the job's identity: all decided before the output
    is looked at."""
    doing(f"listing {display(paths[0])}" + (f" and {len(paths) - 1} more inputs" if len(paths) > 1 else ""))
    resolved = [_text_input(p, o.column, tokenizer, o.tokenizer_settings, o.bos, o.eos) for p in paths]
    encoder = resolved[0].text_encoder
    options = JobOptions(
        column=o.column,
        bos_id=encoder.bos_id,
        eos_id=encoder.eos_id,
        ctx=o.ctx,
        tile=o.tile,
        tokenizer_settings=o.tokenizer_settings,
        shuffle_seed=o.shuffle_seed,
    )
    shards, duplicates = _unique_shards(s for inp in resolved for s in _input_shards(inp))
    doing(f"checking the column of {len(shards):,} shards")
    for s in {s.files[0]: s for s in shards}.values():
        check_column(s, o.column)
    key, sources = _fingerprint(shards, encoder.sha256, options)
    worker = ShardTokenizer(encoder, options)
    extra = {"tokenizer": encoder.summary()}
    if duplicates:
        extra["duplicates"] = (
            f"{len(duplicates)} input file(s) given more than once, read once: "
            + ", ".join(display(f) for f in duplicates[:3])
            + (" ..." if len(duplicates) > 3 else "")
        )
    return _Job(shards, encoder, options, key, sources, worker, extra)


def _existing_store(stage: Staging, job: _Job, overwrite: bool, t0: float) -> JobResult | None:
    """The result when a store of this job is already at the output, whole (its index rewritten in place when
    only ``shard_index.bin`` was damaged); None when the job is to write it: no store there, this job's damaged
    (rebuilt: the same job writes the same bytes), or another job's with ``overwrite``. ValueError for another
    job's without ``overwrite``."""
    output, extra = stage.output, job.extra
    if not is_token_store(output) or (overwrite and not manifest_reads(output)):
        return None
    m = read_manifest(output)
    same = m.get("job") == job.key  # (read_manifest reads only the version this job writes)
    status = "already complete"
    damage = store_damage(output) if same else None  # what verify checks: every byte read back
    if damage and damage.index_only:  # every chunk as recorded: the index rewritten from them, no token
        add_shard_index(output)
        extra["repaired"] = (
            f"{display(output)}: damaged ({damage}); repaired: {INDEX_KEY} rewritten from the chunks "
            f"(no token rewritten)"
        )
        status = "repaired"
        damage = store_damage(output)
    if damage:  # the same job's store, damaged: rebuilt by the caller (the same job writes the same bytes)
        extra["repaired"] = f"{display(output)}: damaged ({damage}); repaired: rebuilt by this run"
    elif same:  # a kill after the rename / the manifest, or a store whose index was rewritten above
        if lacks_shard_index(m):  # written before shard_index.bin: added with --overwrite (tokens kept)
            _add_index(output, overwrite, extra)
        stage.clean(extra)
        shards = len(job.shards)
        seconds = time.perf_counter() - t0
        return JobResult(display(output), m["num_documents"], m["num_tokens"], shards, shards, seconds, status, extra)
    if not overwrite and not damage:  # (a store of an older datatools: refused by read_manifest, naming this job)
        raise ValueError(f"{display(output)}: already exists (a different job); pass --overwrite to replace it")
    return None


def _add_index(output: str | Path, overwrite: bool, extra: dict[str, str]) -> None:
    """A store of this job written before ``shard_index.bin``: the index added with ``overwrite`` (every chunk read
    once, no token rewritten), else a line in ``extra`` saying how to add it."""
    if overwrite:
        add_shard_index(output)
        extra["indexed"] = f"{display(output)}: {INDEX_KEY} added (every shard's index in one object)"
    else:
        extra["indexed"] = (
            f"{display(output)}: written before {INDEX_KEY}; run again with --overwrite to add it "
            f"(reads every chunk once, rewrites no token; a reader in a bucket needs it to skip a "
            f"request per shard)"
        )


def _manifest(job: _Job) -> dict[str, object]:
    """The store's manifest keys this job decides: the tokenizer, the options, the write order, the sources and
    the job's identity."""
    encoder = job.encoder
    return {
        "vocab_size": encoder.vocab_size,
        "tokenizer_sha256": encoder.sha256,
        "tokenizer_file": os.path.basename(encoder.source),
        "tokenizer": encoder.describe(),
        "options": job.options.record(),
        "write_order": write_order_record(job.options.shuffle_seed),
        "sources": [s["path"] for s in job.sources],
        "job": job.key,
        "shards": len(job.shards),
    }


def _commit_store(stage: Staging, job: _Job) -> tuple[int, int]:
    """The staged shards written as the token store and committed in place of the output (in the input's order,
    or the seed's random order); returns its (documents, tokens)."""
    staging, dtype, seed = stage.staging, job.worker.dtype, job.options.shuffle_seed
    lengths_per_shard = [_read(_shard_path(staging, k), "lengths")[0] for k in range(len(job.shards))]
    num_docs = int(sum(x.shape[0] for x in lengths_per_shard))
    num_tokens = int(sum(int(x.sum()) for x in lengths_per_shard))
    manifest = _manifest(job)

    def write(where: str | Path) -> None:
        def store(blocks: Iterable[tuple[np.ndarray, np.ndarray]]) -> None:
            write_store(where, blocks, num_tokens=num_tokens, num_documents=num_docs, dtype=dtype, manifest=manifest)

        if seed is None:
            return store(_blocks_in_order(staging, len(job.shards)))
        if isinstance(staging, Path):  # a local job spills beside its shards (removed with the staging directory)
            return store(_blocks_shuffled(staging, lengths_per_shard, seed, staging / SPILL_NAME, dtype))
        with tempfile.TemporaryDirectory(prefix="datatools-order-") as tmp:  # staging in a bucket: a local spill
            return store(_blocks_shuffled(staging, lengths_per_shard, seed, Path(tmp) / SPILL_NAME, dtype))

    stage.commit(job.key, write, job.extra)
    return num_docs, num_tokens


def _blocks_in_order(staging: str | Path, count: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The staged shards' (tokens, lengths), shard after shard: the store in the input's order."""
    for k in range(count):
        doing(f"writing the token store: shard {k + 1:,} of {count:,}")
        tokens, lengths = _read(_shard_path(staging, k), "tokens", "lengths")
        yield tokens, lengths
        fault(f"committing-{k}")


def _blocks_shuffled(
    staging: str | Path, lengths_per_shard: list[np.ndarray], seed: int, spill: Path, dtype: np.dtype
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The staged shards' documents in ``seed``'s random order (:func:`~datatools.jobs.write_order.shuffled_shards`,
    spilling to ``spill``)."""
    num_docs = int(sum(x.shape[0] for x in lengths_per_shard))
    doing(f"writing the token store in a random order (seed {seed}) of {num_docs:,} documents")
    return shuffled_shards(lambda k: _read(_shard_path(staging, k), "tokens")[0], lengths_per_shard, seed, spill, dtype)


class Damage(str):
    """What is wrong with a store, in a few words; ``index_only``: only ``shard_index.bin`` (every chunk as the
    manifest records), which :func:`~datatools.io.formats.store.add_shard_index` rewrites from the chunks."""

    index_only: bool = False


def store_damage(output: str | Path) -> Damage | None:
    """What is wrong with the token store at ``output`` (:class:`Damage`), or None when it is whole: opened as
    readers open it, every key's size against the manifest (one listing), then everything ``datatools verify``
    checks (:func:`~datatools.io.formats.store_verify.verify_store`: every byte read back, ``shard_index.bin``
    included)."""
    try:
        manifest = read_manifest(output)
        TokenStore(output)
    except ValueError as exc:
        return Damage(_short(exc))
    chunks = manifest.get("chunks")
    if isinstance(chunks, dict):
        sizes = storage.location(output).file_sizes()  # one walk, or one listing: the cheap damage first
        for name in ("tokens", "offsets"):
            for key, record in (chunks.get(name) or {}).items():
                got = sizes.get(f"{name}/{key}")
                if got is None:
                    return Damage(f"{name}/{key} is missing")
                if isinstance(record, list) and record and got != record[0]:
                    return Damage(f"{name}/{key} holds {got} bytes, the manifest records {record[0]}")
    doing(f"checking {display(output)}: every chunk read back (as datatools verify)")
    try:
        verify_store(output)
    except IndexDamage as exc:
        damage = Damage(_short(exc))
        damage.index_only = True
        return damage
    except ValueError as exc:
        return Damage(_short(exc))
    return None


def _short(exc: BaseException) -> str:
    """The error's text on one line, without the repair command it names (the rerun is that repair), cut short."""
    text = " ".join(str(exc).split()).split("; repair: ")[0]
    return text if len(text) <= 300 else text[:297] + "..."


def require_engine(engine: str) -> None:
    """MissingPackage (a ModuleNotFoundError) with the install line when ``engine`` needs a package that is not
    installed."""
    if engine == "ray" and importlib.util.find_spec("ray") is None:
        raise missing("ray", "--engine ray")


def _special(value: bool | str | int | None) -> str | int | None:
    """``--bos``/``--eos`` as given: True means look the usual names up, False/None means none."""
    return "auto" if value is True else None if value is False else value


def _text_input(
    path: str | Path,
    column: str,
    tokenizer: str | os.PathLike[str],
    settings: str,
    bos: bool | str | int | None,
    eos: bool | str | int | None,
) -> TokenInput:
    """``path`` resolved as ``analyze-padding`` and a pipeline resolve it
    (:func:`~datatools.io.sources.inputs.open_input`: a file or directory, a glob or comma list, ArrayRecord files; a
    tokenizers JSON file or a SentencePiece model), plus plain ``.txt`` files; ValueError naming it unless it holds text
    in ``column``."""
    inp = open_input(
        path,
        InputOptions(
            column=column,
            tokenizer=tokenizer,
            tokenizer_settings=settings,
            bos=_special(bos),
            eos=_special(eos),
            text_files=True,
        ),
    )
    if not inp.shards:  # not a table (a table of token ids is refused by open_input: the tokenizer applies to text)
        raise ValueError(
            f"{display(path)}: holds token ids already (a {inp.kind} input); pretokenize reads text (Parquet, "
            f"Arrow, JSON Lines, .txt, ArrayRecord, Hugging Face save_to_disk directories)"
        )
    return inp


def _input_shards(inp: TokenInput) -> list[Shard]:
    """The units of work of a resolved text input: its table shards (an ArrayRecord input: one per file)."""
    return list(inp.shards)


def _unique_shards(shards: Iterable[Shard]) -> tuple[list[Shard], list[str]]:
    """Each shard once (the same file given twice, or through two paths), and the files given more than once."""
    seen: set[tuple[str, tuple[str, ...], int, int]] = set()
    out: list[Shard] = []
    dups: list[str] = []
    for s in shards:
        key = (s.kind, tuple(storage.location(f).identity for f in s.files), s.part, s.stop)
        if key not in seen:
            seen.add(key)
            out.append(s)
        elif s.files[0] not in dups:
            dups.append(s.files[0])
    return out, dups


def _tokenize_shards(
    worker: ShardTokenizer,
    shards: list[Shard],
    todo: list[int],
    pieces: dict[int, int],
    staging: str | Path,
    o: PretokenizeOptions,
) -> int:
    """Tokenize the shards ``todo`` (``pieces``: shard -> pieces already committed) on ``o``'s engine and workers,
    with its progress bar; returns the documents resumed from pieces."""
    workers = o.workers
    sizes = {k: shard_bytes(shards[k]) for k in todo}  # known from listings and footers: nothing read
    done = len(shards) - len(todo)
    with job_progress(len(shards), done=done, enabled=o.progress, total_bytes=sum(sizes.values())) as bar:
        if not todo:
            return 0
        counted = dict.fromkeys(todo, 0)  # bytes counted so far per shard: text characters, capped by its size

        def report(k: int, docs: int, tokens: int, chars: int) -> None:
            add = max(0, min(chars, sizes[k] - counted[k]))
            counted[k] += add
            bar.advance(docs, tokens, shards=0, nbytes=add)

        def finished(k: int, docs: int = 0, tokens: int = 0) -> None:
            bar.advance(docs, tokens, shards=1, nbytes=sizes[k] - counted[k])
            counted[k] = sizes[k]
            fault(f"after-shard-{k}")

        if o.engine == "ray":
            return _run_ray(worker, shards, todo, pieces, staging, workers, o.ray_address, finished)
        if workers == 1:
            resumed = 0
            for k in todo:
                _, _, _, skipped = _run_shard(worker, shards[k], k, str(staging), pieces.get(k, 0), report)
                resumed += skipped
                finished(k)
            return resumed
        tasks = [(shards[k], k, str(staging), pieces.get(k, 0)) for k in todo]
        return _pool_shards(worker, tasks, workers, report, finished)


def _pool_shards(worker: ShardTokenizer, tasks: list[Task], workers: int, report: Report, finished: Finished) -> int:
    """The shards ``tasks`` on a pool of ``workers`` processes reporting through a queue (``report``, then
    ``finished(k)`` per shard); returns the documents resumed. Ctrl-C stops the parent, which terminates the pool
    at once (a worker's unfinished piece is lost)."""
    import multiprocessing as mp
    import queue as queue_module

    ctx = mp.get_context()
    reports: Queue[tuple[int, int, int, int]] = ctx.Queue()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None  # workers start ignoring it
    try:
        pool = ctx.Pool(workers, initializer=_init_pool, initargs=(worker, reports))
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            try:
                item = reports.get(timeout=0.1)
            except queue_module.Empty:
                continue
            except (EOFError, OSError, ValueError):  # the queue went with the pool
                return
            report(*item)

    thread = threading.Thread(target=drain, name="datatools-pretokenize-progress", daemon=True)
    thread.start()
    resumed = 0
    try:
        results = pool.imap(_run_in_pool, tasks)
        while True:
            try:  # a timeout: a Ctrl-C another thread received is acted on here at once, not at the next shard
                k, _, _, skipped = results.next(timeout=0.05)
            except mp.TimeoutError:
                interrupts.check()
                continue
            except StopIteration:
                break
            resumed += skipped
            finished(k)
        pool.close()
    except BaseException:
        pool.terminate()  # SIGTERM: a worker stops where it is, quietly
        raise
    finally:
        pool.join()
        stop.set()
        thread.join()
        reports.close()
        reports.cancel_join_thread()
    return resumed


def _run_ray(
    worker: ShardTokenizer,
    shards: list[Shard],
    todo: list[int],
    pieces: dict[int, int],
    staging: str | Path,
    workers: int,
    ray_address: str | None,
    finished: Finished,
) -> int:
    """Ray Data, one row per shard; ``finished(k)`` as each shard is done. Returns the documents resumed."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(
            address=ray_address,
            num_cpus=None if ray_address else workers,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    try:
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
        items = [
            {
                "k": k,
                "kind": shards[k].kind,
                "files": list(shards[k].files),
                "part": shards[k].part,
                "stop": shards[k].stop,
                "pieces": pieces.get(k, 0),
            }
            for k in todo
        ]

        def tokenize_row(row: dict[str, Any]) -> dict[str, int]:  # Ray's row: its lists come back as arrays
            shard = Shard(row["kind"], tuple(row["files"]), int(row["part"]), int(row["stop"]))
            k, docs, toks, skipped = _run_shard(worker, shard, int(row["k"]), str(staging), int(row["pieces"]))
            return {"k": k, "docs": docs, "tokens": toks, "resumed": skipped}

        ds = ray.data.from_items(items, override_num_blocks=max(1, len(items))).map(
            tokenize_row, num_cpus=1, concurrency=workers
        )
        resumed = 0
        for row in ds.iter_rows():
            resumed += int(row["resumed"])
            finished(int(row["k"]), int(row["docs"]), int(row["tokens"]))
        return resumed
    finally:
        if started:
            ray.shutdown()
