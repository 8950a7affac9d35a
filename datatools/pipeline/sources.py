"""A config's documents opened: one ``source``, or the mixture of ``sources`` read as one
:class:`~datatools.io.sources.mixed_documents.MixedDocuments` (one vocabulary: :func:`check_tokenizers`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeAlias, cast

from datatools.io.sources.documents import DocumentSource
from datatools.io.sources.inputs import FORMAT, InputOptions, TokenInput, open_documents, open_input
from datatools.io.sources.mixed_documents import MixedDocuments
from datatools.pipeline.config import PipelineConfig, SourceConfig

# documents a caller opened already: one source, or one per item of a mixture's sources
OpenedDocuments: TypeAlias = DocumentSource | Sequence[DocumentSource]


def open_source(cfg: SourceConfig) -> DocumentSource:
    """The documents of the configured source (a document source of :mod:`datatools.io`), read on demand."""
    return open_documents(open_source_input(cfg))


def open_source_input(cfg: SourceConfig) -> TokenInput:
    """The configured source resolved (:class:`~datatools.io.sources.inputs.TokenInput`: its kind, column, tokenizer),
    no document read yet; ValueError for a kind a pipeline cannot read."""
    inp = open_input(
        Path(cfg.path),
        InputOptions(
            column=cfg.column,
            tokenizer=cfg.tokenizer,
            tokenizer_settings=cfg.tokenizer_settings,
            bos=cfg.bos,
            eos=cfg.eos,
        ),
    )
    if not FORMAT[inp.format].pipeline:
        raise ValueError(
            f"{cfg.path}: a pipeline source must be a token store, a Levanter cache, a table or a NumPy directory"
        )
    return inp


def open_config_documents(cfg: PipelineConfig, documents: OpenedDocuments | None = None) -> DocumentSource:
    """The config's documents: ``cfg.source``, or the mixture of ``cfg.sources`` read as one; ``documents``: an
    already opened source (a mixture: one per ``sources`` item, or a MixedDocuments)."""
    docs: DocumentSource | MixedDocuments
    if cfg.sources is not None:
        docs = open_mixture(cfg, documents)
    else:
        docs = open_source(cfg.one_source) if documents is None else cast(DocumentSource, documents)  # one source
    if len(docs) == 0:
        where = cfg.source.path if cfg.source is not None else "sources"
        raise ValueError(f"{where}: the source holds no documents")
    return docs


def open_mixture(cfg: PipelineConfig, documents: OpenedDocuments | None = None) -> MixedDocuments:
    """The configured sources as one :class:`MixedDocuments` (``documents``: already opened ones, a
    MixedDocuments or a list with one source per ``sources`` item)."""
    sources = cfg.mixture_sources
    labels = [s.label for s in sources]
    if documents is None:
        inputs = [open_source_input(s) for s in sources]
        check_tokenizers(labels, [tokenizer_identity(i) for i in inputs])
        documents = [open_documents(i) for i in inputs]
    if not isinstance(documents, MixedDocuments):
        documents = MixedDocuments(list(cast(Sequence[DocumentSource], documents)), names=labels)
    if len(documents.sizes) != len(sources):
        raise ValueError(f"config: sources lists {len(sources)} sources; {len(documents.sizes)} were given")
    for label, n in zip(labels, documents.sizes.tolist()):
        if n == 0 and cfg.mixture.epoch == "sample":
            raise ValueError(f"{label}: this source of the mixture holds no documents")
    return documents


def tokenizer_identity(inp: TokenInput) -> dict[str, Any] | None:
    """What tokenized a source (:class:`~datatools.io.sources.inputs.TokenInput`): ``{"file", "sha256", "vocab_size"}``
    from a token store's manifest or a text column's tokenizer (its format says:
    :meth:`~datatools.io.formats.token_input.TokenInput.tokenizer_identity`); None when nothing says."""
    return inp.tokenizer_identity()


def check_tokenizers(labels: list[str], identities: list[dict[str, Any] | None]) -> None:
    """Sources of one mixture must speak one vocabulary: vocabularies of different sizes are a ValueError naming
    both, different tokenizer files of the same size a UserWarning; sources whose tokenizer is not recorded are
    not compared."""
    known = [(label, t) for label, t in zip(labels, identities) if t is not None]
    if not known:
        return
    (first, a), rest = known[0], known[1:]

    def name(t: dict[str, Any]) -> str:
        return f"{t['file'] or 'a tokenizer'} (sha256 {str(t['sha256'])[:12]}, vocab_size {t['vocab_size']})"

    for label, b in rest:
        if b["sha256"] == a["sha256"]:
            continue
        if a["vocab_size"] != b["vocab_size"]:
            raise ValueError(
                f"config: sources {first!r} and {label!r} were tokenized by different tokenizers ({name(a)} and "
                f"{name(b)}): the same token id means different tokens; pretokenize them with one tokenizer"
            )
        warnings.warn(
            f"config: sources {first!r} and {label!r} were tokenized by different tokenizer files ({name(a)} and "
            f"{name(b)}) of the same vocabulary size: mixed as they are; if their tokens differ, pretokenize them "
            f"with one tokenizer",
            stacklevel=3,
        )
