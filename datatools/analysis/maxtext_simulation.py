"""What a MaxText input pipeline wastes today, read from its own config (without importing MaxText), and what to set.

MaxText's Grain pipeline (``data_processing_utils.format_and_batch``), per host: ``packing: false`` pads or cuts one
document per row to ``max_target_length``; ``packing: true`` runs Grain's streaming packer with ``num_packing_bins``
= the per-host batch: ``first_fit`` (capped by ``max_segments_per_seq`` when > 0), ``best_fit`` (never capped:
unsafe for ``cudnn_flash_te``) or ``concat_then_split``; ``batch_and_pad`` pads the last batch with empty rows.
Longer documents: tokenized text is cut (``use_truncation``) or chunked; pre-tokenized ones stop Grain's packers
(``Could not add element to empty packed batch``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from datatools.base.checks import MAX_CTX, MAX_WINDOW, as_lengths, short_repr
from datatools.base.reports import Report

PACKING_TYPES = ("first_fit", "best_fit", "concat_then_split")
# MaxText's attention backends that take segment ids from packed batches; cudnn_flash_te needs the cap.
CAPPED_ATTENTION = ("cudnn_flash_te",)


@dataclass(frozen=True)
class MaxTextSettings:
    """The MaxText config keys that decide how its input pipeline packs (MaxText's names and defaults)."""

    max_target_length: int = 2048
    packing: bool = True
    grain_packing_type: str = "first_fit"
    max_segments_per_seq: int = -1
    per_device_batch_size: float = 12.0
    devices_per_host: int = 1  # not a MaxText key: jax.local_device_count() on the training host
    process_count: int = 1  # not a MaxText key: jax.process_count()
    tokenize_train_data: bool = True
    use_truncation: bool = True
    add_bos: bool = True
    add_eos: bool = True
    enable_data_shuffling: bool = True
    data_shuffle_seed: int = 0
    attention: str = "autoselected"
    hardware: str = "tpu"
    dataset_type: str = "synthetic"
    grain_worker_count: int = 1
    num_epoch: int = 1

    @property
    def per_host_batch(self) -> int:
        """Rows per host per step: MaxText's ``global_batch_size_to_load // process_count``."""
        return max(1, int(self.per_device_batch_size * self.devices_per_host))

    @property
    def segment_cap(self) -> int | None:
        """The cap MaxText's packer applies: ``max_segments_per_seq`` for first fit only (None: no cap)."""
        if self.grain_packing_type == "first_fit" and self.max_segments_per_seq > 0:
            return int(self.max_segments_per_seq)
        return None


def attention_keys(
    attention: str, packing: bool, dataset_type: str, max_segments_per_seq: int, row_segments: int | None
) -> dict[str, bool | str | int | None]:
    """The MaxText keys to change so that ``attention`` keeps the documents of datatools' packed rows apart (empty:
    none). MaxText 0.2.5's ``cudnn_flash_te`` (``attention_op.cudnn_flash_attention``) reads the segment ids only
    when ``packing`` is true and ``dataset_type`` is not ``synthetic``, and then expects at most
    ``max_segments_per_seq`` segments per row; otherwise it attends across the whole row, documents and all. The
    other backends read the segment ids whatever ``packing`` says. ``row_segments``: the most documents (pieces) a
    datatools row holds (None: uncapped); ``max_segments_per_seq`` is then that number, or None when no cap is set
    (the user picks one; analyze-padding --maxtext-config recommends one)."""
    if attention not in CAPPED_ATTENTION:
        return {}
    keys: dict[str, bool | str | int | None] = {}
    if not packing:
        keys["packing"] = True
    if dataset_type == "synthetic":
        keys["dataset_type"] = "grain"
    if max_segments_per_seq <= 0 or row_segments is None or max_segments_per_seq < row_segments:
        keys["max_segments_per_seq"] = row_segments
    return keys


def keys_to_set(keys: dict[str, bool | str | int | None]) -> str:
    """``keys`` as MaxText's ``key=value`` overrides (``true`` for True); N where the number is the user's."""

    def value(v: bool | str | int | None) -> str:
        return "N" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    return " ".join(f"{k}={value(v)}" for k, v in keys.items())


_KEYS = {f.name: f for f in dataclasses.fields(MaxTextSettings)}
_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _coerce(key: str, value: Any, where: str) -> bool | int | float | str:  # value: a YAML scalar or a string
    kind = _KEYS[key].type
    try:
        if kind == "bool":
            return _BOOLS[value.lower()] if isinstance(value, str) else bool(value)
        if kind == "int":
            if isinstance(value, str):
                value = value.replace("_", "")
                try:
                    return int(value)
                except ValueError:
                    value = float(value)
            if isinstance(value, float) and math.isfinite(value) and value == int(value):
                return int(value)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            raise ValueError
        if kind == "float":
            return float(value)
        return str(value)
    except (TypeError, ValueError, OverflowError, KeyError):
        raise ValueError(
            f"{where}: {key} must be a{'n' if kind == 'int' else ''} {kind}; got {short_repr(value)}"
        ) from None


def _load_chain(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    from datatools.io.formats.yaml_files import load_yaml  # the limited safe loader

    if path in seen or len(seen) > 8:
        raise ValueError(f"{path}: base_config chain loops or is deeper than 8 files")
    data = load_yaml(path)
    base = data.pop("base_config", None)
    if not base:
        return data
    return {**_load_chain(path.parent / Path(base), seen + (path,)), **data}  # an absolute base is taken as it is


def _config_data(path: str | os.PathLike[str] | None, overrides: Iterable[str] = ()) -> tuple[dict[str, Any], str]:
    """The config at ``path`` (its ``base_config`` chain followed; None: empty) with the ``key=value`` overrides,
    and how errors name it."""
    data = {} if path is None else _load_chain(Path(path))
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ValueError(f"maxtext setting must be key=value; got {short_repr(item)}")
        key, value = item.split("=", 1)
        data[key.strip()] = value.strip()
    return data, str(path) if path is not None else "maxtext settings"


def read_maxtext_config(path: str | os.PathLike[str] | None = None, overrides: Iterable[str] = ()) -> MaxTextSettings:
    """The packing-relevant settings of the MaxText YAML config at ``path`` (its ``base_config`` chain followed;
    None: MaxText's defaults), with ``key=value`` ``overrides`` (also ``devices_per_host`` and ``process_count``)."""
    data, where = _config_data(path, overrides)
    # each value of its field's type (_coerce)
    values: dict[str, Any] = {k: _coerce(k, v, where) for k, v in data.items() if k in _KEYS and v is not None}
    s = MaxTextSettings(**values)
    if s.grain_packing_type not in PACKING_TYPES:
        raise ValueError(
            f"{where}: grain_packing_type must be one of {', '.join(PACKING_TYPES)}; "
            f"got {short_repr(s.grain_packing_type)}"
        )
    for key, most in (("max_target_length", MAX_CTX), ("devices_per_host", 1 << 20), ("process_count", 1 << 20)):
        if not 1 <= getattr(s, key) <= most:
            raise ValueError(f"{where}: {key} must be in [1, {most:,}]; got {getattr(s, key)}")
    if s.max_segments_per_seq > MAX_CTX:  # checked here, before any document is read (<= 0: no cap)
        raise ValueError(
            f"{where}: max_segments_per_seq must be <= {MAX_CTX:,} (datatools' limit); got {s.max_segments_per_seq}"
        )
    if not (math.isfinite(s.per_device_batch_size) and s.per_device_batch_size > 0):
        raise ValueError(f"{where}: per_device_batch_size must be > 0; got {s.per_device_batch_size}")
    if s.per_device_batch_size * s.devices_per_host > MAX_WINDOW:
        raise ValueError(
            f"{where}: the per-host batch (per_device_batch_size x devices_per_host) must be at most "
            f"{MAX_WINDOW:,} rows (datatools' limit on open packing bins); got "
            f"{s.per_device_batch_size * s.devices_per_host:g}"
        )
    return s


@dataclass(frozen=True)
class MaxTextInputs:
    """What a MaxText config reads: ``grain_train_files`` (a glob or a comma list, as MaxText takes it), the
    feature (``train_data_columns``' first) and the tokenizer (``tokenizer_path`` when ``tokenize_train_data``)."""

    files: str
    column: str | None
    tokenizer: str | None


def maxtext_inputs(path: str | os.PathLike[str] | None, overrides: Iterable[str] = ()) -> MaxTextInputs:
    """The files, feature and tokenizer the MaxText config at ``path`` (with ``overrides``) names; a relative
    ``tokenizer_path`` missing from here is looked up beside the config. No ``grain_train_files``: ValueError."""
    data, where = _config_data(path, overrides)
    files = data.get("grain_train_files")
    if not files or not isinstance(files, str):
        raise ValueError(f"{where}: no grain_train_files to read; name the data as PATH (or set grain_train_files)")
    cols = data.get("train_data_columns")
    if isinstance(cols, str):
        cols = [c.strip(" []'\"") for c in cols.split(",") if c.strip(" []'\"")]
    column = str(cols[0]) if isinstance(cols, list) and cols else None
    tokenizer = None
    if _coerce("tokenize_train_data", data.get("tokenize_train_data", True), where):
        tok = data.get("tokenizer_path")
        if isinstance(tok, str) and tok:
            beside = Path(path).parent / tok if path is not None else None
            tokenizer = str(beside) if beside is not None and not os.path.exists(tok) and beside.exists() else tok
    return MaxTextInputs(files, column, tokenizer)


def _order(lengths: np.ndarray, s: MaxTextSettings) -> np.ndarray:
    """Documents in the order one host's packer sees them: its share (every process_count-th), shuffled when
    MaxText shuffles (a seeded random order: Grain's own permutation differs, its statistics do not)."""
    if s.process_count > 1:
        lengths = lengths[: -(-lengths.shape[0] // s.process_count)]
    if s.enable_data_shuffling and lengths.shape[0] > 1:
        from datatools.kernels.shuffle import FeistelPermutation

        lengths = lengths[FeistelPermutation(lengths.shape[0], s.data_shuffle_seed)(np.arange(lengths.shape[0]))]
    return lengths


@dataclass(frozen=True)
class MaxTextView(Report):
    """One host of a configured MaxText pipeline, simulated (:func:`maxtext_view`)."""

    pipeline: str  # a one-line description
    ctx: int
    bins: int  # the packer's open rows: the per-host batch
    segment_cap: int | None
    packing: bool
    grain_packing_type: str
    rows: int  # packed rows, the last batch padded with empty rows as ``batch_and_pad`` does
    efficiency: float  # real tokens / slots
    padding: float  # 1 - efficiency
    dropped_tokens: int  # cut by truncation
    max_docs_per_row: int | None
    fails: int  # documents that stop MaxText's packer: pre-tokenized, packed and longer than the context
    documents: int


@dataclass(frozen=True)
class MaxTextAdvice(Report):
    """What to set in MaxText, its efficiency, and datatools' (the recommendation's)."""

    maxtext_settings: dict[str, bool | str | int]
    maxtext_efficiency: float
    datatools_efficiency: float
    notes: list[str]


@dataclass(frozen=True)
class MaxTextReport(Report):
    """The ``maxtext`` section of an analyze-padding report (:func:`maxtext_report`)."""

    config: str
    settings: MaxTextSettings
    per_host_batch: int
    today: MaxTextView
    advice: MaxTextAdvice


def maxtext_view(lengths: npt.ArrayLike, settings: MaxTextSettings) -> MaxTextView:
    """Simulate the configured MaxText pipeline on one host: its rows, padding and dropped tokens."""
    from datatools.kernels.packing import count_rows, piece_sizes

    s = settings
    ctx = s.max_target_length
    lengths = _order(as_lengths(lengths), s)
    lengths = lengths[lengths > 0]
    if s.tokenize_train_data:  # MaxText's tokenizer adds these to every text
        lengths = lengths + int(s.add_bos) + int(s.add_eos)
    total = int(lengths.sum())
    bins = s.per_host_batch
    fails = 0
    if s.tokenize_train_data and not s.use_truncation:
        cut = "chunked at the context"
        sizes = piece_sizes(lengths, ctx)  # pieces of ctx, in order: nothing dropped
    else:
        cut = "cut at the context"
        if s.packing and not s.tokenize_train_data:
            fails = int(np.count_nonzero(lengths > ctx))
            cut = "passed whole to the packer"
        sizes = np.minimum(lengths, ctx).astype(np.int32)
    kept_tokens = int(sizes.sum())
    cap = s.segment_cap
    if not s.packing:
        rows, most, name = int(sizes.shape[0]), 1, "no packing (one document per row)"
    elif s.grain_packing_type == "first_fit":
        c = count_rows(ctx, "first_fit", sizes=sizes, max_segments=cap, window=bins)
        rows, most = c.rows, c.max_pieces_per_row
        name = f"Grain first fit, {bins} bins" + (f", at most {cap} documents per row" if cap else ", no cap")
    elif s.grain_packing_type == "best_fit":
        c = count_rows(ctx, "best_fit", sizes=sizes, window=bins)
        rows, most = c.rows, c.max_pieces_per_row
        name = f"Grain best fit, {bins} bins, no cap (MaxText passes max_segments_per_seq to first fit only)"
    else:
        rows, most = -(-kept_tokens // ctx), None
        name = "Grain concat then split"
    rows = int(-(-int(rows) // bins) * bins)  # batch_and_pad fills the last batch with empty rows
    slots = rows * ctx
    efficiency = kept_tokens / slots if slots else 0.0
    return MaxTextView(
        f"{name}; documents longer than {ctx} {cut}",
        ctx,
        bins,
        cap,
        s.packing,
        s.grain_packing_type,
        rows,
        efficiency,
        1.0 - efficiency,
        total - kept_tokens,
        None if most is None else int(most),
        fails,
        int(lengths.shape[0]),
    )


def maxtext_report(
    lengths: npt.ArrayLike,
    settings: MaxTextSettings,
    *,
    datatools_cap: int | None,
    datatools_efficiency: float,
    config: str,
) -> MaxTextReport:
    """The ``maxtext`` section of an analyze-padding report: :func:`maxtext_view` of the pipeline as configured, and
    what to set in MaxText (first fit whenever a cap is needed) against datatools' recommendation."""
    lengths = as_lengths(lengths)
    today = maxtext_view(lengths, settings)

    def packed(kind: str, cap: int | None) -> MaxTextView:  # the configured pipeline with this packer and cap
        replaced = dataclasses.replace(settings, packing=True, grain_packing_type=kind, max_segments_per_seq=cap or -1)
        return maxtext_view(lengths, replaced)

    capped = datatools_cap is not None  # the recommendation's cap: MaxText's first_fit takes it
    if settings.attention in CAPPED_ATTENTION or settings.max_segments_per_seq > 0 or capped:
        # a cap the config sets is the attention kernel's limit: keep it; else the recommended one, else the most
        # documents first fit puts in a row (a cap that costs nothing)
        cap = settings.max_segments_per_seq if settings.max_segments_per_seq > 0 else datatools_cap
        if cap is None:
            cap = packed("first_fit", None).max_docs_per_row
        own_type, own_cap = "first_fit", cap
        why = (
            "attention: cudnn_flash_te needs max_segments_per_seq, which MaxText applies with first_fit only"
            if settings.attention in CAPPED_ATTENTION
            else "a segment cap is set, and MaxText applies it with first_fit only (best_fit ignores it)"
            if settings.max_segments_per_seq > 0
            else f"the recommendation caps rows at {cap} documents, which MaxText applies with first_fit only"
        )
    else:
        own_type, own_cap = "best_fit", None
        why = "no segment cap needed by the attention: best_fit (MaxText gives it no cap)"
    own: dict[str, bool | str | int] = {"packing": True, "grain_packing_type": own_type}  # what to set in MaxText
    if own_cap is not None:
        own["max_segments_per_seq"] = own_cap
    own_view = packed(own_type, own_cap)
    notes = [
        why,
        "attention on packed rows needs packing: true (segment ids); dot_product and flash take them, "
        "cudnn_flash_te also needs max_segments_per_seq",
    ]
    if today.fails:
        notes.append(
            f"{today.fails:,} pre-tokenized documents are longer than max_target_length="
            f"{today.ctx}: MaxText's packer stops on the first; datatools splits them "
            f"(datatools.integrations.maxtext.create_data_iterator)"
        )
    advice = MaxTextAdvice(own, own_view.efficiency, datatools_efficiency, notes)
    return MaxTextReport(config, settings, settings.per_host_batch, today, advice)
