"""The analyzer's recommendation as a complete pipeline config (``analyze-padding --write-config``): one that
``datatools pipeline PATH`` runs as written and the named trainer's integration accepts."""

from __future__ import annotations

import os
from typing import Any

from datatools.analysis.maxtext_simulation import CAPPED_ATTENTION, MaxTextSettings, attention_keys, keys_to_set
from datatools.analysis.padding_result import PaddingReport
from datatools.base.checks import DEFAULT_ALGORITHM, TRAINERS
from datatools.io import storage
from datatools.kernels.packing.algorithms import BY_NAME

DEFAULT_BATCH = 32  # rows per global batch when no trainer config says


def pipeline_config(
    report: PaddingReport,
    *,
    source: str,
    trainer: str = "datatools",
    column: str | None = None,
    tokenizer: str | None = None,
    maxtext_settings=None,
    tokenizer_settings: str | None = None,
    bos: str | None = None,
    eos: str | None = None,
) -> dict[str, Any]:
    """A pipeline config mapping for ``report``'s recommendation: ``source`` (the path, glob or comma list the
    analysis read, with its ``column`` and ``tokenizer`` file when given, and the ``tokenizer_settings`` and
    ``bos`` / ``eos`` tokens it tokenized with: the documents the analysis counted), the ``trainer``'s batch
    ``format`` (of :data:`TRAINERS`), and with ``maxtext_settings``
    (a :class:`~datatools.analysis.maxtext_simulation.MaxTextSettings`) its ctx, segment cap and global batch
    (``global_batch_size_to_load``; else :data:`DEFAULT_BATCH` rows)."""
    if trainer not in TRAINERS:
        raise ValueError(f"trainer must be one of {', '.join(TRAINERS)}; got {trainer!r}")
    rec = report.recommendation
    ctx, cap, batch_size = rec.ctx, rec.max_segments, DEFAULT_BATCH
    if trainer == "maxtext" and maxtext_settings is not None:
        s = maxtext_settings
        ctx = int(s.max_target_length)
        if s.max_segments_per_seq > 0:
            cap = int(s.max_segments_per_seq)
        elif s.attention in CAPPED_ATTENTION and report.maxtext is not None:  # the cap the report says to set
            advised = report.maxtext.advice.maxtext_settings.get("max_segments_per_seq")
            cap = advised if isinstance(advised, int) and not isinstance(advised, bool) else cap
        batch_size = max(1, int(s.per_device_batch_size * s.devices_per_host * s.process_count))
    packer = BY_NAME.get(rec.strategy)
    if packer is None or packer.cuts_documents:
        packer = BY_NAME[DEFAULT_ALGORITHM]
    src: dict[str, Any] = {"path": source}
    if column is not None:
        src["column"] = column
    if tokenizer is not None:
        src["tokenizer"] = os.fspath(tokenizer)
        if tokenizer_settings not in (None, "off"):
            src["tokenizer_settings"] = tokenizer_settings
        for key, token in (("bos", bos), ("eos", eos)):
            if token is not None:
                src[key] = str(token)
    return {
        "source": src,
        "shuffle": {"kind": "full" if packer.mode == "planned" else "none"},
        "packing": {"mode": packer.mode, "ctx": ctx, "algorithm": packer.name, "max_segments": cap},
        "batch_size": batch_size,
        "drop_remainder": True,
        "format": trainer,
        "num_epochs": 1,
        "seed": 0,
    }


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


def write_pipeline_config(path: str | os.PathLike, config: dict[str, Any], maxtext_keys: str = "") -> None:
    """Write ``config`` as YAML to ``path``, with a header saying where it came from (and the MaxText settings
    it needs, :func:`maxtext_keys`)."""
    import yaml

    header = "# written by datatools analyze-padding --write-config: run it with `datatools pipeline PATH`\n"
    if maxtext_keys:
        header += f"# MaxText needs: {maxtext_keys} (its attention keeps packed documents apart only then)\n"
    storage.write_text(path, header + yaml.safe_dump(config, sort_keys=False))  # a file (atomically) or a URL
