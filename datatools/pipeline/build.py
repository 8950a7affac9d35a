"""YAML config -> validated :class:`PipelineConfig` -> Grain dataset of batches (see docs/pipelines.md).

Every mode (:mod:`datatools.pipeline.schedules`) is one global batch sequence computed from the documents'
lengths alone; each host reads its rows (:mod:`datatools.grain.host_batches`), so the batches and the iterator's
state (global batches consumed) do not depend on the number of workers or hosts.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tempfile
import warnings
import weakref
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from absl import flags

import datatools.grain  # noqa: F401  (first: it quiets the warning Grain logs when imported without jax)
import grain
from datatools.base.install import install_command
from datatools.base.numba_cache import kernels_cold
from datatools.base.progress import doing
from datatools.grain.attention_blocks import AttentionBlocks
from datatools.grain.batch import FormatBatch
from datatools.grain.host_batches import HostBatchesMapDataset
from datatools.grain.host_reader import HostBatchesIterDataset
from datatools.grain.loss_weights import LossWeights
from datatools.grain.portable_state import PortableStateIterDataset
from datatools.grain.schedule import Schedule
from datatools.grain.worker_processes import prefetch_in_processes
from datatools.io.sources.documents import ChunkedDocuments, DocumentSource, StoreDocuments, documents_per_read
from datatools.io.sources.mixed_documents import MixedDocuments
from datatools.io.storage import read_stats
from datatools.kernels.warm import compile_first_batch_beside, warm_in_background
from datatools.pipeline.config import ConfigLike, PipelineConfig, ShardConfig, as_config
from datatools.pipeline.mixture import WEIGHTS_KEY, History, mixture_identity, reweighted_history
from datatools.pipeline.schedules import build_schedule
from datatools.pipeline.sources import OpenedDocuments, open_config_documents


@dataclass
class CanonicalPipeline:
    """A built pipeline: the Grain dataset of canonical batches and what was decided building it."""

    dataset: grain.IterDataset
    config: PipelineConfig
    documents: int
    shapes: list[tuple[int, int]]
    batches: grain.MapDataset  # this host's canonical batches by global batch number (random access)
    schedule: Schedule  # the global batch sequence (grain/schedule.py; the config's mode: pipeline/schedules.py)
    documents_source: DocumentSource  # the document source read (a mixture's: MixedDocuments)
    plan_efficiency: float | None = None
    identity: dict[str, Any] | None = None  # what fixes the global batch sequence (states restore only into the same)
    # where worker processes write their read counters (datatools.io.storage.read_stats)
    stats_folder: str | None = None


READ_THREADS = 4  # reader threads for sources that do I/O
TABLE_READ_THREADS = 1  # for a table (Parquet, Arrow, JSON Lines) read a shard at a time: it decodes under one lock
READ_BUFFER = 16  # elements (batches or document blocks) read ahead


def _iterate(
    ds: grain.MapDataset,
    host: HostBatchesMapDataset,
    cfg: PipelineConfig,
    docs: DocumentSource,
    in_memory: bool,
    threads: int,
) -> grain.IterDataset:
    """The host's batches in order. Without workers, one reader (:class:`HostBatchesIterDataset`: read and built
    ahead in a thread; in memory, built when asked). With workers (a source whose batches cost CPU: text tokenized
    as it is read, tables), Grain's processes, each with a few reader threads and a short buffer. A token store or a
    Levanter cache is I/O, read by the host's one reader: workers are refused for it."""
    if not cfg.workers:
        return HostBatchesIterDataset(ds, host, threaded=not in_memory)
    if isinstance(docs, StoreDocuments) or host.reads_ahead:
        raise ValueError(
            f"config: workers={cfg.workers}: a token store or a Levanter cache is read by one reader per host, in "
            f"threads (its reads are I/O); worker processes are for sources tokenized as they are read; set workers: 0"
        )
    if isinstance(docs, ChunkedDocuments):
        docs.release()  # its shards are read in the worker processes: what the pass for the lengths kept is not
    threads, buffer = (0, 0) if in_memory else (threads, READ_BUFFER)
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=buffer))
    if not flags.FLAGS.is_parsed():  # Grain's workers read absl flags, never parsed outside an absl app
        flags.FLAGS.mark_as_parsed()
    return prefetch_in_processes(it, cfg.workers)


def _warn_if_blocks_are_smaller_than_reads(docs: DocumentSource, cfg: PipelineConfig) -> None:
    """Warn when a block shuffle's io blocks are much smaller than what one read of a store in a bucket fetches
    (its inner chunk): each block then costs the whole chunk (a Levanter cache's 262,144-token chunks under blocks of
    64 documents fetched 5.2x the tokens delivered, issue 52), and name the block sizes that read whole chunks, one and
    two a block (blocks of one chunk 337 x 195 fetched 1.74x over 500 batches, the chunks at their edges read for
    other lanes' blocks too; the schedule's model: 1.88x, two chunks a block 1.52x)."""
    if cfg.shuffle.kind != "block" or not isinstance(docs, StoreDocuments) or not docs.reads_ahead:
        return
    lengths = docs.lengths()
    mean = float(lengths.mean()) if lengths.shape[0] else 0.0
    chunk = int(docs.store.read_granularity)
    block = int(cfg.shuffle.io_block_size)
    if mean <= 0 or 2 * block * mean >= chunk:
        return
    fit = documents_per_read(chunk, mean)
    warnings.warn(
        f"{cfg.one_source.path}: io_block_size {block} documents (~{block * mean:,.0f} tokens) is under half of what "
        f"one read of it fetches ({chunk:,} tokens, its inner chunk): each block costs ~{chunk / (block * mean):.1f}x "
        f"its tokens from the bucket; io_block_size {fit} reads whole chunks (~2x: a block's edge chunks are shared "
        f"with other lanes' blocks), {2 * fit} two chunks a block (~1.5x; window_blocks scaled down to keep the "
        f"window's documents)",
        stacklevel=3,
    )


def _warn_if_random_access_thrashes(docs: DocumentSource, cfg: PipelineConfig) -> None:
    """Warn when a table source (decoded a shard at a time) is read in random order and does not fit the cache:
    each read then decodes a shard."""
    if not isinstance(docs, ChunkedDocuments):
        return
    random_access = cfg.shuffle.kind != "none" or (cfg.packing is not None and cfg.packing.mode == "planned")
    decoded = 4 * int(docs.lengths().sum())
    if random_access and decoded > docs.cache_bytes:
        planned = ", planned packing" if cfg.packing and cfg.packing.mode == "planned" else ""
        warnings.warn(
            f"{cfg.one_source.path}: {decoded >> 20} MiB of tokens read in random order from a table "
            f"(shuffle {cfg.shuffle.kind!r}{planned})"
            f" decode a whole shard per read; pre-tokenize it into a token store (datatools pretokenize) "
            f"or use shuffle 'none' with streaming packing",
            stacklevel=3,
        )


def resolve_shard(cfg: PipelineConfig) -> PipelineConfig:
    """``shard: auto`` as this process's ``{index: jax.process_index(), count: jax.process_count()}`` (call
    ``jax.distributed.initialize`` first when there are several processes); any other config unchanged."""
    if cfg.shard != "auto":
        return cfg
    try:
        import jax  # the jax extra: optional
    except ImportError:
        raise ValueError(
            "config: shard: auto takes the host from jax.process_index(), and jax is not installed "
            f"({install_command('jax')}), or give shard: {{index, count}}"
        ) from None
    return cfg.replace(shard=ShardConfig(index=jax.process_index(), count=jax.process_count()))


def pipeline_identity(cfg: PipelineConfig, docs: DocumentSource) -> dict[str, Any]:
    """What fixes the global batch sequence, saved in every state and compared on restore (not the host count,
    the workers or the batch format, which may change)."""
    lengths = np.ascontiguousarray(docs.lengths(), dtype=np.int64)
    name = "packing" if cfg.packing else "curriculum" if cfg.curriculum else "bucketing"
    section = getattr(cfg, name)
    balance = {"balance": [cfg.devices, cfg.balance_across]} if cfg.balance_across > 1 else {}  # batch contents
    return balance | {
        "documents": int(lengths.shape[0]),
        "tokens": int(lengths.sum()),
        "lengths_crc32": zlib.crc32(lengths.tobytes()),
        "seed": cfg.seed,
        "shuffle": repr(dataclasses.astuple(cfg.shuffle)),
        name: repr(dataclasses.asdict(section)),
        "batch_size": cfg.batch_size,
        "drop_remainder": cfg.drop_remainder,
        "num_epochs": cfg.num_epochs,
        "pad_id": cfg.pad_id,
    }


def _with_batch_maps(host: grain.MapDataset, cfg: PipelineConfig, tile_devices: int = 1) -> grain.MapDataset:
    """``host`` with each batch's attention tiles (``attention_block``; one list per device of ``tile_devices``
    when above 1) and loss weights (``loss_weighting``) added: maps before the prefetch, computed in the worker
    processes."""
    if cfg.attention_block is not None:
        bad = [t for _, t in host.shapes if t % cfg.attention_block]
        if bad:
            raise ValueError(
                f"config: attention_block={cfg.attention_block} must divide every row length (got {bad[0]})"
            )
        host = host.map(AttentionBlocks(cfg.attention_block, tile_devices))
    if cfg.loss_weighting != "none":
        host = host.map(LossWeights(cfg.loss_weighting))
    return host


def _host_batches(
    cfg: PipelineConfig, docs: DocumentSource, history: History | None = None
) -> tuple[Schedule, HostBatchesMapDataset, float | None]:
    """``(schedule, host dataset, plan efficiency)`` of the config over opened ``docs``."""
    schedule, efficiency = build_schedule(cfg, docs, history)
    shard = cfg.shard
    if not isinstance(shard, ShardConfig):
        raise ValueError("config: shard: auto is this process's place, resolved first (resolve_shard)")
    try:
        host = HostBatchesMapDataset(
            schedule,
            index=shard.index,
            count=shard.count,
            num_epochs=cfg.num_epochs,
        )
    except ValueError as exc:
        raise ValueError(f"config: batch_size={cfg.batch_size}, shard.count={cfg.shard.count}: {exc}") from None
    return schedule, host, efficiency


_COMPILING: list[subprocess.Popen[bytes]] = []  # processes compiling kernels beside this one (held, not waited for)
_COLD = " (numba compiles its kernels on this first run, once: `datatools warm` does it ahead)"


def _kernels_cold() -> bool:
    """Whether numba's cache holds none of the packing and shuffle kernels a pipeline's first batches run."""
    import importlib

    from datatools.kernels import shuffle
    from datatools.kernels.packing import counting, pieces

    # the module: `from datatools.kernels.packing import materialize` is the function of that name (found by mypy)
    materialize = importlib.import_module("datatools.kernels.packing.materialize")
    return kernels_cold([counting, pieces, materialize, shuffle])


def _build_canonical(
    cfg: PipelineConfig,
    documents: OpenedDocuments | None = None,
    history: History | None = None,
    tile_devices: int = 1,
) -> CanonicalPipeline:
    """:func:`build_canonical` of a config whose ``shard`` is resolved, without the portable state;
    ``history``: a mixture's weight history (default the config's weights)."""
    warm_in_background()  # numba's start-up (0.4-1.1 s) while the source opens (from a bucket: ~2 s of requests)
    docs = open_config_documents(cfg, documents)
    in_memory = docs.in_memory
    # a table decodes under one lock: more threads only wait (0.98 against 0.82 CPU s an epoch of 40M tokens)
    threads = TABLE_READ_THREADS if isinstance(docs, ChunkedDocuments) else READ_THREADS
    _warn_if_random_access_thrashes(docs, cfg)
    _warn_if_blocks_are_smaller_than_reads(docs, cfg)
    cold = _kernels_cold()
    if cold and isinstance(docs, StoreDocuments):  # the first batch's last kernels compiled beside this process
        _COMPILING.append(compile_first_batch_beside(docs.store.dtype, {"format": cfg.format, **cfg.batch_options}))
    doing(f"planning the batches of {len(docs):,} documents{_COLD if cold else ''}")
    schedule, host, efficiency = _host_batches(cfg, docs, history)
    identity = pipeline_identity(cfg, docs)
    if cfg.sources is not None:
        assert isinstance(docs, MixedDocuments)  # a mixture's documents (open_mixture)
        identity.update(mixture_identity(cfg, docs, history))
    elements = _with_batch_maps(host, cfg, tile_devices)
    stats_folder = None
    if cfg.workers and not in_memory:  # each worker process counts its reads into a file there
        stats_folder = tempfile.mkdtemp(prefix="datatools-reads-")
        elements = elements.map(read_stats.CountIn(stats_folder))
    dataset = _iterate(elements, host, cfg, docs, in_memory, threads)
    built = CanonicalPipeline(
        dataset, cfg, len(docs), host.shapes, host, schedule, docs, efficiency, identity, stats_folder
    )
    if stats_folder is not None:
        weakref.finalize(built, shutil.rmtree, stats_folder, True)
    return built


def build_canonical(
    cfg: PipelineConfig, documents: OpenedDocuments | None = None, *, tile_devices: int = 1
) -> CanonicalPipeline:
    """The pipeline up to canonical batches (``tokens``, ``segment_ids``, ``positions``, ``loss_mask``); its
    iterator's state restores into the same config with any number of workers and of hosts
    (:class:`~datatools.grain.portable_state.PortableStateIterDataset`), and refuses another config or data.

    Args:
      cfg: the validated config (``shard: auto`` is resolved here, from jax).
      documents: an already opened source (else ``cfg.source`` is opened).
      tile_devices: the devices this host's rows are split over, contiguous slices (``datatools train``'s local
        devices): with ``attention_block``, each batch carries one tile list per device (the sharded block-sparse
        kernel's input) instead of one for the batch.
    """
    cfg = resolve_shard(cfg)
    built = _build_canonical(cfg, documents, tile_devices=tile_devices)
    reweight = None
    if cfg.sources is not None:
        docs = built.documents_source

        def reweight(saved: dict[str, Any], consumed: int) -> tuple[grain.IterDataset, dict[str, Any] | None]:
            """The pipeline restored after ``consumed`` batches of a state saved with other weights."""
            history = reweighted_history(
                cfg, saved.get(WEIGHTS_KEY), consumed, lambda h: _host_batches(cfg, docs, h)[:2]
            )
            again = _build_canonical(cfg, docs, history, tile_devices)
            return again.dataset, again.identity

    built.dataset = PortableStateIterDataset(
        built.dataset, built.identity, reweight=reweight, reweightable=(WEIGHTS_KEY,)
    )
    return built


def build(
    config: ConfigLike, *, source: str | None = None, documents: OpenedDocuments | None = None
) -> grain.IterDataset:
    """A Grain ``IterDataset`` of batches in the config's format.

    Args:
      config: a :class:`PipelineConfig`, a mapping (validated here), or a YAML path.
      source: overrides ``source.path``.
      documents: an already opened source (ArrayDocuments or TokenStore) to use instead.
    """
    cfg = as_config(config, source=source)
    return build_canonical(cfg, documents).dataset.map(FormatBatch(cfg.format, **cfg.batch_options))
