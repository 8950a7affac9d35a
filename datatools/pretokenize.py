"""The pre-tokenize job: text in, a token store out; on a local process pool or on Ray Data.

How it stays resumable and atomic:

1. The input is cut into shards (:mod:`datatools.sources`). The job's identity (its
   *fingerprint*) hashes the input files (path, size, mtime), the tokenizer file and
   the options.
2. Work happens in a staging directory beside the output, ``OUTPUT.partial``. Each
   shard is tokenized and written there as ``shards/NNNNNN.npz`` (tokens and lengths)
   through a temporary file and a rename, so a shard file is complete or absent.
3. When every shard is there, the store is written into ``OUTPUT.partial/store``
   and renamed to ``OUTPUT`` in one step. A reader sees no store or a whole one.

A job killed at any point (SIGKILL included) and started again skips the shards
already committed, rewrites the store from scratch, and ends with a store
byte-identical to an uninterrupted run. Both engines write the same shard files
and share the commit step, so their stores are identical too.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from datatools._io import atomic_write_text
from datatools.sources import Shard, check_column, list_shards, read_texts
from datatools.store import is_token_store, read_manifest, token_dtype, write_store
from datatools.tiles import chunk

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class JobOptions:
    """What decides the store's content (everything but where and how fast)."""

    column: str = "text"
    bos: bool = False
    eos: bool = False
    ctx: int | None = None
    tile: int | None = None


@dataclass
class JobResult:
    output: str
    documents: int
    tokens: int
    shards: int
    shards_resumed: int
    seconds: float
    status: str  # "written", "resumed", "already complete"
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- fault injection (tests)


def _fault(point: str) -> None:
    """Kill this process with SIGKILL when DATATOOLS_FAULT names this point (crash tests)."""
    want = os.environ.get("DATATOOLS_FAULT")
    if want and want == point:
        os.kill(os.getpid(), signal.SIGKILL)


# --------------------------------------------------------------------------- tokenizer


def load_tokenizer(path: str | os.PathLike):
    """A Hugging Face ``tokenizers.Tokenizer`` from its JSON file; ValueError naming the file otherwise."""
    from tokenizers import Tokenizer

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: tokenizer file not found")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed files
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path}: not a valid tokenizers JSON file ({first})") from None


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- tokenizing one shard


def flatten_ids(ids: list[list[int]], dtype) -> tuple[np.ndarray, np.ndarray]:
    """Token id lists back to back as one ``dtype`` array, and each list's length (int64)."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum())), lengths


class ShardTokenizer:
    """Tokenizes shards into (tokens, lengths); picklable (carries the tokenizer JSON text)."""

    def __init__(self, tokenizer_json: str, options: JobOptions, vocab_size: int):
        self.tokenizer_json = tokenizer_json
        self.options = options
        self.dtype = token_dtype(vocab_size)
        self._tok = None

    def __getstate__(self):
        return {**self.__dict__, "_tok": None}

    @property
    def tokenizer(self):
        if self._tok is None:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_str(self.tokenizer_json)
        return self._tok

    def _special_id(self, which: str) -> int:
        tok = self.tokenizer
        for name in ({"bos": ("<s>", "<bos>", "<|begin_of_text|>", "[CLS]", "<|endoftext|>"),
                      "eos": ("</s>", "<eos>", "<|end_of_text|>", "[SEP]", "<|endoftext|>")}[which]):
            i = tok.token_to_id(name)
            if i is not None:
                return i
        raise ValueError(f"--{which}: the tokenizer has no {which.upper()} token (looked for <s>, </s>, <|endoftext|>, ...)")

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Tokens of all texts back to back, and the length of each (tokens)."""
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        ids = [e.ids for e in encodings]
        o = self.options
        if o.bos or o.eos:
            bos = [self._special_id("bos")] if o.bos else []
            eos = [self._special_id("eos")] if o.eos else []
            ids = [bos + x + eos for x in ids]
        flat, lengths = flatten_ids(ids, self.dtype)
        if o.ctx:
            flat, lengths = _chunk_all(flat, lengths, o.ctx, o.tile or 1)
        return flat, lengths

    def __call__(self, shard: Shard) -> tuple[np.ndarray, np.ndarray]:
        return self.encode(read_texts(shard, self.options.column))


def _chunk_all(flat: np.ndarray, lengths: np.ndarray, ctx: int, tile: int) -> tuple[np.ndarray, np.ndarray]:
    """Split documents longer than ctx into tile-aligned windows (tiles.chunk); tokens unchanged."""
    if not (lengths > ctx).any():
        return flat, lengths
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    out: list[int] = []
    for i in range(lengths.shape[0]):
        if lengths[i] > ctx:
            out.extend(len(w) for w in chunk(flat[offsets[i] : offsets[i + 1]], ctx, tile=tile))
        else:
            out.append(int(lengths[i]))
    return flat, np.asarray(out, dtype=np.int64)


def _shard_path(staging: Path, k: int) -> Path:
    return staging / "shards" / f"{k:06d}.npz"


def _write_shard(path: Path, tokens: np.ndarray, lengths: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, tokens=tokens, lengths=lengths)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _read_shard(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return z["tokens"], z["lengths"]


def _read_shard_lengths(path: Path) -> np.ndarray:
    with np.load(path, allow_pickle=False) as z:
        return z["lengths"]


def _run_shard(args) -> tuple[int, int, int]:
    """Worker body (both engines): tokenize shard k, commit its file. Returns (k, docs, tokens)."""
    worker, shard, k, staging = args
    tokens, lengths = worker(shard)
    path = _shard_path(Path(staging), k)
    try:
        _write_shard(path, tokens, lengths)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    return k, int(lengths.shape[0]), int(tokens.size)


_WORKER: ShardTokenizer | None = None


def _init_pool(worker: ShardTokenizer) -> None:
    global _WORKER
    _WORKER = worker


def _run_in_pool(args) -> tuple[int, int, int]:
    shard, k, staging = args
    return _run_shard((_WORKER, shard, k, staging))


# --------------------------------------------------------------------------- the job


def _fingerprint(shards: list[Shard], tokenizer_sha: str, options: JobOptions) -> tuple[str, list[dict]]:
    sources = []
    for name in dict.fromkeys(f for s in shards for f in s.files):  # input files, in shard order
        f = Path(name)
        st = f.stat()
        sources.append({"path": str(f.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    blob = json.dumps({"sources": sources, "tokenizer": tokenizer_sha, "options": asdict(options), "v": 1},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest(), sources


def _check_disk(path: Path) -> None:
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return
    if free < 1 << 20:
        raise OSError(28, f"No space left on device under {path}")


def pretokenize(inputs, output, tokenizer: str | os.PathLike, *, column: str = "text", bos: bool = False,
                eos: bool = False, ctx: int | None = None, tile: int | None = None, workers: int = 1,
                engine: str = "local", ray_address: str | None = None, overwrite: bool = False,
                progress: bool = True) -> JobResult:
    """Tokenize text files into a token store at ``output`` (see the module docstring).

    Args:
      inputs: a path or list of paths: Parquet, JSON Lines, ``.txt`` files, Arrow
        IPC, Hugging Face ``save_to_disk`` directories, or directories of these.
      output: the store directory to create.
      tokenizer: a Hugging Face ``tokenizers`` JSON file.
      column: the text column (Parquet, Arrow, JSON Lines, HF datasets).
      bos, eos: add the tokenizer's BOS / EOS token around every document.
      ctx, tile: with ctx, split documents longer than ctx tokens into tile-aligned
        windows of ctx (tiles.chunk; nothing lost). ctx must be a multiple of tile.
      workers: tokenizer processes (local) or Ray tasks in flight.
      engine: ``local`` (process pool) or ``ray`` (Ray Data).
      ray_address: Ray cluster address; None starts a local Ray instance.
      overwrite: replace an existing store made by a different job.
      progress: show a rich progress bar on stderr.

    Raises:
      ValueError: unreadable input, missing column, bad tokenizer, an existing
        output of another job without ``overwrite``, bad options.
      OSError: the disk is full (nothing incomplete is committed).
    """
    t0 = time.perf_counter()
    inputs = [Path(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    if not inputs:
        raise ValueError("no inputs given")
    output = Path(output)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if ctx is not None:
        tile = tile or 1
        if ctx < 1 or tile < 1 or ctx % tile:
            raise ValueError(f"--ctx {ctx} must be a positive multiple of --tile {tile}")
    elif tile is not None:
        raise ValueError("--tile needs --ctx")
    tok_path = Path(tokenizer)
    tok = load_tokenizer(tok_path)
    options = JobOptions(column=column, bos=bos, eos=eos, ctx=ctx, tile=tile)
    tokenizer_sha = _file_sha256(tok_path)
    shards = [s for p in inputs for s in list_shards(p)]
    for s in {s.files[0]: s for s in shards}.values():
        check_column(s, column)
    job, sources = _fingerprint(shards, tokenizer_sha, options)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    worker = ShardTokenizer(tok_path.read_text(), options, vocab_size)
    if bos:
        worker._special_id("bos")
    if eos:
        worker._special_id("eos")

    if output.exists():
        if is_token_store(output) and read_manifest(output).get("job") == job:
            m = read_manifest(output)
            return JobResult(str(output), m["num_documents"], m["num_tokens"], len(shards), len(shards),
                             time.perf_counter() - t0, "already complete")
        if not overwrite:
            raise ValueError(f"{output}: already exists (a different job); pass --overwrite to replace it")
    output.parent.mkdir(parents=True, exist_ok=True)
    _check_disk(output.parent)

    staging = output.with_name(output.name + ".partial")
    job_file = staging / "job.json"
    if staging.exists():
        try:
            same = json.loads(job_file.read_text()).get("job") == job
        except (OSError, ValueError):
            same = False
        if not same:
            shutil.rmtree(staging)
    (staging / "shards").mkdir(parents=True, exist_ok=True)
    if not job_file.exists():
        atomic_write_text(job_file, json.dumps({"job": job, "shards": len(shards)}) + "\n")

    todo = [k for k in range(len(shards)) if not _shard_path(staging, k).exists()]
    resumed = len(shards) - len(todo)
    _tokenize_shards(worker, shards, todo, staging, workers, engine, ray_address, progress)

    # Commit: every shard is on disk. Build the store in staging, then rename it into place.
    lengths_per_shard = [_read_shard_lengths(_shard_path(staging, k)) for k in range(len(shards))]
    num_docs = int(sum(x.shape[0] for x in lengths_per_shard))
    num_tokens = int(sum(int(x.sum()) for x in lengths_per_shard))
    store_tmp = staging / "store"
    if store_tmp.exists():
        shutil.rmtree(store_tmp)
    manifest = {"vocab_size": vocab_size, "tokenizer_sha256": tokenizer_sha, "tokenizer_file": tok_path.name,
                "options": asdict(options), "sources": [s["path"] for s in sources], "job": job,
                "shards": len(shards)}
    write_store(store_tmp, (_read_shard(_shard_path(staging, k)) for k in range(len(shards))),
                num_tokens=num_tokens, num_documents=num_docs, dtype=worker.dtype, manifest=manifest)
    _fault("before-rename")
    if output.exists():  # overwrite: move the old store aside, put the new one in, then delete the old
        old = output.with_name(output.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(output, old)
        os.replace(store_tmp, output)
        shutil.rmtree(old)
    else:
        os.replace(store_tmp, output)
    shutil.rmtree(staging)
    return JobResult(str(output), num_docs, num_tokens, len(shards), resumed, time.perf_counter() - t0,
                     "resumed" if resumed else "written")


def _tokenize_shards(worker, shards, todo, staging, workers, engine, ray_address, progress) -> None:
    from datatools.progress import job_progress

    with job_progress(len(shards), done=len(shards) - len(todo), enabled=progress) as bar:
        if not todo:
            return
        if engine == "ray":
            _run_ray(worker, shards, todo, staging, workers, ray_address, bar)
        elif workers == 1:
            for k in todo:
                _, docs, toks = _run_shard((worker, shards[k], k, str(staging)))
                bar.advance(docs, toks)
                _fault(f"after-shard-{k}")
        else:
            with ProcessPoolExecutor(workers, initializer=_init_pool, initargs=(worker,)) as pool:
                for k, docs, toks in pool.map(_run_in_pool, [(shards[k], k, str(staging)) for k in todo]):
                    bar.advance(docs, toks)
                    _fault(f"after-shard-{k}")


def _run_ray(worker, shards, todo, staging, workers, ray_address, bar) -> None:
    """Ray Data: one row per shard; each task tokenizes its shard and commits its file."""
    import ray

    started = False
    if not ray.is_initialized():
        ray.init(address=ray_address, num_cpus=None if ray_address else workers, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
        started = True
    try:
        import ray.data

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        items = [{"k": k, "kind": shards[k].kind, "files": list(shards[k].files), "part": shards[k].part} for k in todo]

        def tokenize_row(row: dict) -> dict:
            shard = Shard(row["kind"], tuple(row["files"]), int(row["part"]))
            k, docs, toks = _run_shard((worker, shard, int(row["k"]), str(staging)))
            return {"k": k, "docs": docs, "tokens": toks}

        ds = ray.data.from_items(items, override_num_blocks=max(1, len(items))).map(tokenize_row, num_cpus=1,
                                                                                     concurrency=workers)
        for row in ds.iter_rows():
            bar.advance(int(row["docs"]), int(row["tokens"]))
    finally:
        if started:
            ray.shutdown()
