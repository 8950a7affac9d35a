"""The analyzer's recommendation as a complete pipeline config (``analyze-padding --write-config``): one that
``datatools pipeline PATH`` runs as written and the named trainer's integration accepts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from datatools.analysis.maxtext_simulation import CAPPED_ATTENTION, MaxTextSettings, attention_keys, keys_to_set
from datatools.analysis.padding_result import PaddingReport
from datatools.base.checks import DEFAULT_ALGORITHM, TRAINERS
from datatools.io import storage
from datatools.io.sources.documents import documents_per_read
from datatools.kernels.packing.algorithms import BY_NAME

DEFAULT_BATCH = 32  # rows per global batch when no trainer config says
BLOCK_DOCUMENTS = 64  # a block shuffle's documents per io block, at least (docs/levanter.md)
WINDOW_DOCUMENTS = 64 * 1024  # documents a block shuffle's window holds (64 x 1024, the defaults)
STREAMING_WINDOW = 1024  # documents streaming packing plans together


@dataclass(frozen=True)
class ConfigSource:
    """The source a written config reads: the path, glob or comma list the analysis read, written with its
    ``column`` and ``tokenizer`` file when given, and the ``tokenizer_settings`` and ``bos`` / ``eos`` tokens it
    tokenized with (a tokenizer's settings and tokens only with the tokenizer)."""

    path: str
    column: str | None = None
    tokenizer: str | os.PathLike[str] | None = None
    tokenizer_settings: str | None = None
    bos: str | None = None
    eos: str | None = None

    def mapping(self) -> dict[str, Any]:
        """The config's ``source`` mapping: the keys given, ``tokenizer_settings`` only when not the default
        ``off``."""
        src: dict[str, Any] = {"path": self.path}
        if self.column is not None:
            src["column"] = self.column
        if self.tokenizer is not None:
            src["tokenizer"] = os.fspath(self.tokenizer)
            if self.tokenizer_settings not in (None, "off"):
                src["tokenizer_settings"] = self.tokenizer_settings
            for key, token in (("bos", self.bos), ("eos", self.eos)):
                if token is not None:
                    src[key] = str(token)
        return src


def pipeline_config(
    report: PaddingReport,
    *,
    source: ConfigSource | str,
    trainer: str = "datatools",
    maxtext_settings: MaxTextSettings | None = None,
) -> dict[str, Any]:
    """A pipeline config mapping for ``report``'s recommendation whose one epoch delivers every document and token
    the analysis counted (``drop_remainder: false``: the last batch is padded with empty rows, not dropped).

    Args:
      source: what the analysis read (:class:`ConfigSource`), or its path alone.
      trainer: the batch ``format`` (of :data:`TRAINERS`). ``levanter``: what docs/levanter.md shows (a block
        shuffle, streaming packing, ``num_epochs: null``: Levanter's ``num_train_steps`` decides when to stop).
      maxtext_settings: a :class:`~datatools.analysis.maxtext_simulation.MaxTextSettings`: with ``maxtext``, its
        ctx, segment cap and global batch (``global_batch_size_to_load``; else :data:`DEFAULT_BATCH` rows).

    A source in a bucket (``s3://``, ``gs://``) is read as our bucket table measured it: a block shuffle whose io
    blocks fill one read of the store (:func:`~datatools.io.sources.documents.documents_per_read`), streaming
    packing."""
    if trainer not in TRAINERS:
        raise ValueError(f"trainer must be one of {', '.join(TRAINERS)}; got {trainer!r}")
    src = ConfigSource(source) if isinstance(source, str) else source
    ctx, cap, batch_size = _shape(report, maxtext_settings if trainer == "maxtext" else None)
    packer = BY_NAME.get(report.recommendation.strategy)
    if packer is None or packer.cuts_documents:
        packer = BY_NAME[DEFAULT_ALGORITHM]
    shuffle: dict[str, Any] = {"kind": "full" if packer.mode == "planned" else "none"}
    packing: dict[str, Any] = {"mode": packer.mode, "ctx": ctx, "algorithm": packer.name, "max_segments": cap}
    read_tokens = (report.input or {}).get("read_tokens")
    in_bucket = storage.location(src.path).reads_are_requests
    if in_bucket or trainer == "levanter":
        block = BLOCK_DOCUMENTS
        if in_bucket and read_tokens:  # blocks of whole reads: smaller ones cost a read each (issue 52)
            block = max(block, documents_per_read(read_tokens, report.num_tokens / max(1, report.num_sequences)))
        shuffle = {"kind": "block", "io_block_size": block, "window_blocks": max(1, WINDOW_DOCUMENTS // block)}
        packing = {"mode": "streaming", "ctx": ctx, "window": STREAMING_WINDOW, "overflow": "split"}
        if trainer != "levanter":  # Levanter's attention takes segment ids, no cap (docs/levanter.md)
            packing["max_segments"] = cap
    return {
        "source": src.mapping(),
        "shuffle": shuffle,
        "packing": packing,
        "batch_size": batch_size,
        "drop_remainder": False,
        "format": trainer,
        "num_epochs": None if trainer == "levanter" else 1,
        "seed": 0,
    }


def _shape(report: PaddingReport, maxtext: MaxTextSettings | None) -> tuple[int, int | None, int]:
    """(ctx, documents per row cap, rows per batch): the recommendation's, with :data:`DEFAULT_BATCH` rows; with a
    MaxText config's settings, its ``max_target_length``, its cap (or the one the report advises for an attention
    that needs one) and its global batch."""
    rec = report.recommendation
    ctx, cap, batch_size = rec.ctx, rec.max_segments, DEFAULT_BATCH
    if maxtext is not None:
        s = maxtext
        ctx = int(s.max_target_length)
        if s.max_segments_per_seq > 0:
            cap = int(s.max_segments_per_seq)
        elif s.attention in CAPPED_ATTENTION and report.maxtext is not None:  # the cap the report says to set
            advised = report.maxtext.advice.maxtext_settings.get("max_segments_per_seq")
            cap = advised if isinstance(advised, int) and not isinstance(advised, bool) else cap
        batch_size = max(1, int(s.per_device_batch_size * s.devices_per_host * s.process_count))
    return ctx, cap, batch_size


def maxtext_keys(config: dict[str, Any], settings: MaxTextSettings | None) -> str:
    """The MaxText ``key=value`` settings that MaxText's config (``settings``) lacks for the written ``config``'s
    packed rows (its attention must keep their documents apart: ``cudnn_flash_te`` needs ``packing=true`` and
    ``max_segments_per_seq``); empty when there are none or no MaxText config."""
    if settings is None or config.get("format") != "maxtext":
        return ""
    s = settings
    keys = attention_keys(
        s.attention, s.packing, s.dataset_type, s.max_segments_per_seq, config["packing"].get("max_segments")
    )
    return keys_to_set(keys)


def config_text(config: dict[str, Any], maxtext_keys: str = "") -> str:
    """``config`` as the YAML ``--write-config`` writes and the report prints (the same text), with a header (and
    the MaxText settings it needs, :func:`maxtext_keys`)."""
    import yaml

    header = "# by datatools analyze-padding --write-config; run: datatools pipeline PATH\n"  # fits 80 columns
    if maxtext_keys:
        header += f"# MaxText needs: {maxtext_keys} (its attention keeps packed documents apart only then)\n"
    text: str = yaml.safe_dump(config, sort_keys=False)
    return header + text


def write_pipeline_config(path: str | os.PathLike[str], config: dict[str, Any], maxtext_keys: str = "") -> None:
    """Write :func:`config_text` of ``config`` to ``path``: a file (atomically) or a URL."""
    storage.location(path).write_text(config_text(config, maxtext_keys))
