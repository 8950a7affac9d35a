"""MaxText fed by a datatools pipeline, configured with MaxText's own keys (the key mapping: docs/trainers.md).

:func:`create_data_iterator` has the signature and result of MaxText's
``input_pipeline_interface.create_data_iterator(config, mesh)`` (``MultiHostDataLoadIterator`` objects over a
pipeline in the ``maxtext`` format, so its train step, ``total_weights`` and Grain checkpointing work unchanged);
:func:`use_datatools` installs it for a ``with`` block and :func:`train` runs MaxText's pre-training with it::

    from datatools.integrations import maxtext
    maxtext.train(["src/maxtext/configs/base.yml", "dataset_type=grain", "grain_train_files=demo_data/store",
                   "steps=1000"], pipeline="maxtext_pipeline.yaml")

or ``python -m datatools.integrations.maxtext --pipeline P.yaml CONFIG.yml key=value ...``. A datatools key that
contradicts MaxText's is an error; MaxText's ``packing: false`` does not turn packing off (with ``attention:
cudnn_flash_te`` it is refused: that kernel keeps packed documents apart only with ``packing: true`` and
``max_segments_per_seq``). A restart on fewer hosts (``expansion_factor_real_data`` = hosts now / hosts before)
continues the global batch sequence exactly.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datatools.analysis.maxtext_simulation import attention_keys, keys_to_set
from datatools.base.checks import MAX_BATCH, MAX_CTX, check_int
from datatools.base.errors import MissingPackage
from datatools.integrations.maxtext_shim import TESTED_MAXTEXT
from datatools.io.formats.yaml_files import load_yaml
from datatools.pipeline import PipelineConfig, build, parse_config

if TYPE_CHECKING:
    import jax
    from jax.sharding import Mesh

    import grain

__all__ = ["create_data_iterator", "pipeline_config", "use_datatools", "train", "main"]

# a datatools pipeline config: a YAML file's path, a mapping, or None (datatools' defaults)
Pipeline = str | os.PathLike[str] | Mapping[str, Any] | None
Batch = dict[str, "jax.Array"]  # a global batch: one array per key, over the mesh's devices
TrainIterators = Iterator[Batch] | list[Iterator[Batch]]  # one per host, or views of one (fewer hosts' restart)


def _setting(config: object, key: str, default: object = None) -> object:
    """MaxText's ``key`` (an attribute of ``pyconfig.HyperParameters``, or a mapping's entry), else ``default``."""
    try:
        return getattr(config, key)
    except (AttributeError, KeyError, ValueError):
        return config.get(key, default) if isinstance(config, dict) else default


def _int_setting(
    config: object, key: str, default: int | None = None, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """A MaxText integer key, checked (TypeError / ValueError naming the MaxText key)."""
    value = _setting(config, key, default)
    if value is None:
        raise ValueError(f"MaxText config has no {key}")
    return check_int(value, f"MaxText {key}", minimum=minimum, maximum=maximum)


def _expansion(config: object) -> float:
    """MaxText's ``expansion_factor_real_data`` when it is a restart on fewer hosts (1/k, k >= 2), else 1.0."""
    value = _setting(config, "expansion_factor_real_data", -1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"MaxText expansion_factor_real_data must be a number; got {value!r}")
    if not 0 < value < 1:
        return 1.0
    if abs(round(1 / value) * value - 1) > 1e-6:
        raise ValueError(
            f"MaxText expansion_factor_real_data={value!r} below 1 must be 1/k (hosts now / hosts "
            f"that saved the checkpoint, e.g. 0.5 for 2 -> 1)"
        )
    return float(value)


def _pipeline_mapping(pipeline: Pipeline) -> dict[str, Any]:
    """The pipeline config's mapping (a copy; empty for None)."""
    if pipeline is None:
        return {}
    if isinstance(pipeline, (str, os.PathLike)):
        return load_yaml(pipeline)
    if isinstance(pipeline, dict):
        return dict(pipeline)
    raise TypeError(f"pipeline must be a YAML path, a mapping or None; got {type(pipeline).__name__}")


def _agree(data: dict[str, Any], section: str | None, key: str, value: object, maxtext_key: str) -> None:
    """Set ``key`` (in ``section``) to MaxText's ``value``; a different value already there is an error."""
    target = data if section is None else data.setdefault(section, {})
    if not isinstance(target, dict):
        return  # the schema reports the malformed section
    have = target.get(key)
    if have is not None and have != value:
        where = key if section is None else f"{section}.{key}"
        raise ValueError(
            f"datatools pipeline {where}={have!r} contradicts MaxText's {maxtext_key}={value!r}; "
            f"drop it from the pipeline config (MaxText's value is used)"
        )
    target[key] = value


def _check_attention(config: object, packing: object, cap: int) -> None:
    """ValueError (one line naming the MaxText keys to set) when MaxText's attention would not keep the documents
    of the packed rows apart (:func:`~datatools.analysis.maxtext_simulation.attention_keys`)."""
    attention = str(_setting(config, "attention", "autoselected"))
    rows = packing.get("max_segments") if isinstance(packing, dict) else None
    keys = attention_keys(
        attention,
        str(_setting(config, "packing", True)).lower() not in ("false", "0", "no"),
        str(_setting(config, "dataset_type", "grain")),
        cap,
        rows if isinstance(rows, int) and not isinstance(rows, bool) else None,
    )
    if keys:
        raise ValueError(
            f"MaxText attention={attention} would attend across the documents in datatools' packed rows (it keeps "
            f"them apart only with packing=true and max_segments_per_seq at least the documents a row holds): set "
            f"{keys_to_set(keys)}"
            + (
                " (N: the most documents per row; analyze-padding --maxtext-config recommends one)"
                if keys.get("max_segments_per_seq", 0) is None
                else ""
            )
        )


def pipeline_config(
    config: object,
    pipeline: Pipeline = None,
    *,
    process_index: int = 0,
    process_count: int = 1,
    split: str = "train",
) -> PipelineConfig:
    """The datatools pipeline config for a MaxText config (``pyconfig.HyperParameters`` or a mapping) and a
    datatools ``pipeline`` (YAML path or mapping; its ``source`` may be left out when ``grain_train_files`` names
    the data), for this host of ``process_count``. ``split``: ``train`` or ``eval`` (``grain_eval_files``,
    ``global_batch_size_to_load_eval``, no shuffle, one epoch)."""
    data = _pipeline_mapping(pipeline)
    ctx = _int_setting(config, "max_target_length", minimum=1, maximum=MAX_CTX)
    process_count = check_int(process_count, "process_count", minimum=1)
    global_batch, files, data = _split_settings(config, data, split)
    expansion = _expansion(config)
    if expansion < 1:  # MaxText loads expansion x the batch: one saved host's share per step; we build it all
        global_batch = round(global_batch / expansion)
    if global_batch % process_count:
        raise ValueError(f"MaxText's global batch {global_batch} does not divide over {process_count} processes")
    if "source" not in data:
        if not files:
            raise ValueError("no data: give the datatools pipeline a source, or MaxText grain_train_files")
        data["source"] = {"path": str(files)}
    _check_fixed_shapes(data)
    data.setdefault("packing", {})
    _agree(data, "packing", "ctx", ctx, "max_target_length")
    _agree(data, None, "batch_size", global_batch, "global_batch_size_to_load")  # global, as MaxText's
    cap = _int_setting(config, "max_segments_per_seq", -1, maximum=MAX_CTX)
    if cap > 0:
        _agree(data, "packing", "max_segments", cap, "max_segments_per_seq")
    _check_attention(config, data["packing"], cap)
    _agree(data, None, "format", "maxtext", "(the MaxText batch layout)")
    if split == "train":
        data.setdefault("seed", _int_setting(config, "data_shuffle_seed", 0, minimum=0))
        if _setting(config, "enable_data_shuffling", True) is False:
            data["shuffle"] = {"kind": "none"}
        data.setdefault("num_epochs", _int_setting(config, "num_epoch", 1, minimum=1))
    workers = _int_setting(config, "grain_worker_count", -1)
    if workers >= 0 and not _read_by_one_reader(data):
        data["workers"] = workers
    data["shard"] = {"index": check_int(process_index, "process_index", minimum=0), "count": process_count}
    return parse_config(data)


def _split_settings(config: object, data: dict[str, Any], split: str) -> tuple[int, object, dict[str, Any]]:
    """The global batch MaxText loads for ``split``, its files setting, and the pipeline mapping for it (for
    ``eval``: MaxText's evaluation files, no shuffle, one epoch)."""
    if split == "train":
        return (
            _int_setting(config, "global_batch_size_to_load", minimum=1, maximum=MAX_BATCH),
            _setting(config, "grain_train_files", ""),
            data,
        )
    if split != "eval":
        raise ValueError(f"split must be 'train' or 'eval'; got {split!r}")
    key = (
        "global_batch_size_to_load_eval"
        if _setting(config, "global_batch_size_to_load_eval")
        else "global_batch_size_to_load"
    )
    global_batch = _int_setting(config, key, minimum=1, maximum=MAX_BATCH)
    files = _setting(config, "grain_eval_files", "")
    if not files:
        raise ValueError("MaxText eval_interval > 0 needs grain_eval_files naming the evaluation data")
    data = {k: v for k, v in data.items() if k not in ("source", "shuffle", "num_epochs", "batch_size")}
    data.update(source={"path": str(files)}, shuffle={"kind": "none"}, num_epochs=1)
    return global_batch, files, data


def _read_by_one_reader(data: dict[str, Any]) -> bool:
    """Whether the pipeline reads a token store or a Levanter cache: read by the host's one reader in threads, not in
    worker processes, so MaxText's ``grain_worker_count`` (``base.yml``: 1) is not a datatools ``workers`` there."""
    from datatools.io.formats.levanter_cache import is_levanter_cache
    from datatools.io.formats.store import is_token_store

    sources = data.get("sources") or [data.get("source") or {}]
    paths = [str(s["path"]) for s in sources if isinstance(s, dict) and isinstance(s.get("path"), str)]
    return bool(paths) and all(is_token_store(p) or is_levanter_cache(p) for p in paths)


def _check_fixed_shapes(data: dict[str, Any]) -> None:
    """MaxText trains on one (batch, max_target_length) shape: no bucketing, no curriculum."""
    if data.get("bucketing") is not None:
        raise ValueError("MaxText trains on fixed (batch, max_target_length) shapes: use packing, not bucketing")
    if data.get("curriculum") is not None:
        raise ValueError(
            "MaxText trains on one (batch, max_target_length) shape per run: a curriculum's batches of several "
            "lengths need a trainer that takes a sequence length per step (datatools train; docs/curriculum.md)"
        )


class HostBatchIterator:
    """MaxText's iterator contract without MaxText: each host's batch becomes one global ``jax.Array`` per key,
    split over the mesh's devices along the batch axis; ``local_iterator`` is the Grain iterator (checkpointed)."""

    def __init__(self, dataset: grain.IterDataset, mesh: Mesh) -> None:
        from jax.sharding import NamedSharding, PartitionSpec

        self.dataset = dataset
        self.mesh = mesh
        spec = PartitionSpec(mesh.axis_names)  # type: ignore[no-untyped-call]  # jax's PartitionSpec.__new__ is untyped
        self.sharding = NamedSharding(mesh, spec)
        self.local_iterator = iter(dataset)

    def __iter__(self) -> HostBatchIterator:
        return self

    def __next__(self) -> Batch:
        import jax

        batch = next(self.local_iterator)
        make = jax.make_array_from_process_local_data  # untyped in jax
        return {k: make(self.sharding, v) for k, v in batch.items()}  # type: ignore[no-untyped-call]


def _host_iterator(dataset: Iterable[dict[str, Any]], mesh: Mesh, generate_padding_batch: bool) -> Iterator[Batch]:
    """MaxText's ``MultiHostDataLoadIterator`` over ``dataset`` (:class:`HostBatchIterator` without MaxText)."""
    try:
        from maxtext.input_pipeline.multihost_dataloading import MultiHostDataLoadIterator
    except ImportError:
        return HostBatchIterator(dataset, mesh)
    loader: Iterator[Batch] = MultiHostDataLoadIterator(dataset, mesh, generate_padding_batch)
    return loader


def create_data_iterator(
    config: object, mesh: Mesh, *, pipeline: Pipeline = None
) -> tuple[TrainIterators, Iterator[Batch] | None]:
    """MaxText's ``create_data_iterator(config, mesh)`` over a datatools pipeline (YAML path or mapping; default
    the ``DATATOOLS_PIPELINE`` environment variable, else datatools' defaults): ``(train_iterator, eval_iterator)``,
    MaxText ``MultiHostDataLoadIterator`` objects (:class:`HostBatchIterator` where MaxText is not installed;
    a list of them on a restart on fewer hosts); ``eval_iterator`` is None unless ``eval_interval > 0``."""
    import jax

    if pipeline is None:
        pipeline = os.environ.get("DATATOOLS_PIPELINE") or None
    index, count = jax.process_index(), jax.process_count()
    train_cfg = pipeline_config(config, pipeline, process_index=index, process_count=count)
    train_padding = bool(_setting(config, "generate_padding_batch_train", False))
    views = round(1 / _expansion(config))
    if views > 1:  # a restart on fewer hosts: MaxText restores this many iterators per host and takes them in turn;
        it = iter(build(train_cfg))  # a datatools state is the global position, so they are views of ONE iterator
        train_it: TrainIterators = [_host_iterator(it, mesh, train_padding) for _ in range(views)]
    else:
        train_it = _host_iterator(build(train_cfg), mesh, train_padding)
    eval_it = None
    if _int_setting(config, "eval_interval", -1) > 0:
        eval_cfg = pipeline_config(config, pipeline, process_index=index, process_count=count, split="eval")
        eval_it = _host_iterator(build(eval_cfg), mesh, bool(_setting(config, "generate_padding_batch_eval", False)))
    return train_it, eval_it


@contextlib.contextmanager
def use_datatools(pipeline: Pipeline = None) -> Iterator[None]:
    """Within the block, MaxText's trainers get their data from :func:`create_data_iterator` with ``pipeline``
    (:mod:`datatools.integrations.maxtext_shim`). Use MaxText's ``dataset_type: grain`` so that its checkpoints
    save the data iterator's state."""
    from datatools.integrations.maxtext_shim import maxtext_data_iterator

    with maxtext_data_iterator(functools.partial(create_data_iterator, pipeline=pipeline)):
        yield


def _config_file(path: str) -> str | None:
    """MaxText's config file: a path, or the name MaxText's own commands give it (``src/maxtext/configs/base.yml``,
    which MaxText resolves to its installed package's configs when that path is not here); None when neither."""
    if Path(path).is_file():
        return path
    try:
        from maxtext.configs.pyconfig import resolve_config_path
    except ImportError:
        return None
    resolved = resolve_config_path(path)
    return resolved if Path(resolved).is_file() else None


def train(argv: Sequence[str | os.PathLike[str]], pipeline: Pipeline = None) -> None:
    """Run MaxText's pre-training (``maxtext.trainers.pre_train.train.main``) on a datatools pipeline (YAML path
    or mapping). ``argv``: MaxText's command line without the program name: a config file (a path, or MaxText's
    own ``src/maxtext/configs/base.yml``) then ``key=value`` overrides (a key given twice: the last value).
    Without MaxText here: :class:`MissingPackage` naming the Python and the install, not ``No module named``."""
    if importlib.util.find_spec("maxtext") is None:
        raise MissingPackage(_not_installed(), name="maxtext")
    from maxtext.trainers.pre_train import train as maxtext_train

    args = [str(a) for a in argv]
    config = _config_file(args[0]) if args else None
    if config is None:
        raise ValueError(f"the first argument must be a MaxText config file; got {args[:1]}")
    args[0] = config
    with use_datatools(pipeline):
        maxtext_train.main(["maxtext"] + args)


def _not_installed() -> str:
    """The line for MaxText missing here: the Python it needs (3.12) and the extra for the hardware (``tpu``, or
    ``cuda12`` for NVIDIA GPUs), in one command each, and that datatools goes into the same venv."""
    here = f"Python {sys.version_info[0]}.{sys.version_info[1]}"
    return (
        f"MaxText is not installed in {sys.executable} ({here}); MaxText {TESTED_MAXTEXT} needs Python 3.12: in a "
        f"Python 3.12 venv, pip install 'maxtext[tpu]=={TESTED_MAXTEXT}' (TPU) or "
        f"'maxtext[cuda12]=={TESTED_MAXTEXT}' (NVIDIA GPU), then datatools into the same venv "
        f"(make test-clients installs it in .clients/maxtext)"
    )


def main(args: Sequence[str] | None = None) -> int:
    """``python -m datatools.integrations.maxtext [--pipeline P.yaml] CONFIG.yml [key=value ...]``."""
    parser = argparse.ArgumentParser(
        prog="python -m datatools.integrations.maxtext",
        description="Run MaxText's pre-training on a datatools pipeline.",
    )
    parser.add_argument("--pipeline", help="datatools pipeline config (YAML) for what MaxText has no key for")
    parser.add_argument("maxtext_args", nargs="+", help="MaxText config file, then key=value overrides")
    ns = parser.parse_args(args)
    if ns.pipeline is not None and not Path(ns.pipeline).is_file():
        print(f"{ns.pipeline}: pipeline config not found", file=sys.stderr)
        return 2
    installed = importlib.util.find_spec("maxtext") is not None
    if not Path(ns.maxtext_args[0]).is_file() and not (installed and _config_file(ns.maxtext_args[0])):
        print(f"{ns.maxtext_args[0]}: MaxText config file not found", file=sys.stderr)
        return 2
    if not installed:  # the environment, not the input: exit 1, one line
        print(f"python -m datatools.integrations.maxtext: {_not_installed()}", file=sys.stderr)
        return 1
    try:
        train(ns.maxtext_args, pipeline=ns.pipeline)
    except (ValueError, TypeError) as exc:
        print(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
