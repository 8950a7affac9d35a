"""A config's ``sources:`` (a mixture) in the pipeline: opening them, their order, identity and weight changes.

The sources are opened one by one (each with its own column, tokenizer and special tokens,
:func:`datatools.pipeline.build.open_source`) and read as one
:class:`~datatools.io.mixed_documents.MixedDocuments`; the streaming and bucketing schedules
read them in a :class:`~datatools.grain.mixture_order.MixtureOrder` instead of one source's
shuffle, so the global batch sequence is still computed from lengths alone and the state is
still the global batches consumed (any worker or host count).

Weights are the one part of a config that may change at a restore. The weights in force are
recorded in the pipeline's identity as a history ``[[position, [w0, w1, ...]], ...]``
(``position``: documents drawn over all epochs); restoring a state into a config with other
weights adds an entry at the first position the consumed batches do not depend on
(:func:`reweighted_history`): every batch before the restore point is unchanged, the draws from
there on use the new weights, and the state saved afterwards carries the whole history.
"""

from __future__ import annotations

from pathlib import Path

from datatools.pipeline.config import PipelineConfig

WEIGHTS_KEY = "mixture_weights"  # the identity entry that may differ at a restore


def open_mixture(cfg: PipelineConfig, documents=None):
    """The configured sources as one :class:`MixedDocuments` (``documents``: already opened ones, a
    MixedDocuments or a list with one source per ``sources`` item)."""
    from datatools.io.mixed_documents import MixedDocuments

    sources = cfg.mixture_sources
    labels = [s.label for s in sources]
    if documents is None:
        from datatools.io.inputs import open_documents
        from datatools.pipeline.build import open_source_input

        inputs = [open_source_input(s) for s in sources]
        check_tokenizers(labels, [tokenizer_identity(i) for i in inputs])
        documents = [open_documents(i) for i in inputs]
    if not isinstance(documents, MixedDocuments):
        documents = MixedDocuments(list(documents), names=labels)
    if len(documents.sizes) != len(sources):
        raise ValueError(f"config: sources lists {len(sources)} sources; {len(documents.sizes)} were given")
    for label, n in zip(labels, documents.sizes.tolist()):
        if n == 0 and cfg.mixture.epoch == "sample":
            raise ValueError(f"{label}: this source of the mixture holds no documents")
    return documents


def tokenizer_identity(inp) -> dict | None:
    """What tokenized a source (:class:`~datatools.io.inputs.TokenInput`): ``{"file", "sha256", "vocab_size"}``
    from a token store's manifest (recorded by ``pretokenize``) or from the tokenizer a text column is read
    with; None when nothing says (token columns, NumPy files, Levanter caches: ids of an unnamed tokenizer)."""
    if inp.kind == "store":
        from datatools.io.store import read_manifest

        m = read_manifest(inp.path)
        if not m.get("tokenizer_sha256"):
            return None
        return {"file": m.get("tokenizer_file"), "sha256": m["tokenizer_sha256"], "vocab_size": m.get("vocab_size")}
    enc = getattr(inp, "encoder", None)
    if inp.kind == "table" and getattr(inp, "is_text", False) and enc is not None:
        return {"file": Path(str(enc.source)).name, "sha256": enc.sha256, "vocab_size": enc.vocab_size}
    return None


def check_tokenizers(labels: list[str], identities: list[dict | None]) -> None:
    """Sources of one mixture must speak one vocabulary: the same token id must mean the same token in every
    batch. Sources tokenized with vocabularies of different sizes are refused (ValueError naming both); the same
    size from different tokenizer files (a re-saved or edited tokenizer.json, or a different tokenizer that happens
    to have as many tokens) is a UserWarning saying so. Sources whose tokenizer is not recorded are not compared."""
    known = [(label, t) for label, t in zip(labels, identities) if t is not None]
    if not known:
        return
    (first, a), rest = known[0], known[1:]

    def name(t: dict) -> str:
        return f"{t['file'] or 'a tokenizer'} (sha256 {str(t['sha256'])[:12]}, vocab_size {t['vocab_size']})"

    for label, b in rest:
        if b["sha256"] == a["sha256"]:
            continue
        if a["vocab_size"] != b["vocab_size"]:
            raise ValueError(
                f"config: sources {first!r} and {label!r} were tokenized by different tokenizers ({name(a)} and "
                f"{name(b)}): the same token id means different tokens; pretokenize them with one tokenizer"
            )
        import warnings

        warnings.warn(
            f"config: sources {first!r} and {label!r} were tokenized by different tokenizer files ({name(a)} and "
            f"{name(b)}) of the same vocabulary size: mixed as they are; if their tokens differ, pretokenize them "
            f"with one tokenizer",
            stacklevel=3,
        )


def initial_history(cfg: PipelineConfig) -> list:
    """``[[0, weights]]``: the config's weights from the first document on."""
    return [[0, [float(s.weight) for s in cfg.mixture_sources]]]


def draw_rates(cfg: PipelineConfig, docs, weights) -> list[float]:
    """The documents' draw rates that give ``weights``: the weights themselves (``share: documents``), or each
    weight over its source's mean document length (``share: tokens``: a source's expected share of the tokens drawn
    is then its weight)."""
    import numpy as np

    weights = np.asarray(weights, np.float64)
    if cfg.mixture.share == "documents":
        return weights.tolist()
    lengths = docs.lengths()
    tokens = np.array([lengths[a:b].sum() for a, b in zip(docs.offsets[:-1], docs.offsets[1:])], np.float64)
    empty = (tokens == 0) & (docs.sizes > 0)
    if empty.any():
        raise ValueError(
            f"{docs.names[int(np.flatnonzero(empty)[0])]}: this source of the mixture holds no tokens; "
            f"its weight is a share of the tokens (mixture.share: tokens)"
        )
    mean = np.divide(tokens, docs.sizes, out=np.ones_like(tokens), where=docs.sizes > 0)
    return (weights / mean).tolist()


def mixture_order(cfg: PipelineConfig, docs, history=None):
    """The :class:`MixtureOrder` of the config over ``docs`` (a MixedDocuments), with ``history``'s weights."""
    from datatools.grain.mixture_order import MixtureOrder

    sh = cfg.shuffle
    history = [(p, draw_rates(cfg, docs, w)) for p, w in (history or initial_history(cfg))]
    return MixtureOrder(
        docs.sizes,
        history,
        mode=cfg.mixture.epoch,
        epoch_documents=cfg.mixture.epoch_documents,
        shuffle=sh.kind,
        seed=cfg.seed,
        io_block_size=sh.io_block_size,
        window_blocks=sh.window_blocks,
    )


def mixture_identity(cfg: PipelineConfig, docs, history=None) -> dict:
    """The identity entries of a mixture: how its epochs end and each source's documents (a change refuses a
    state), and the weight history (a change is a reweighting, see the module docstring)."""
    return {
        "mixture": repr((cfg.mixture.epoch, cfg.mixture.epoch_documents, cfg.mixture.share, docs.sizes.tolist())),
        WEIGHTS_KEY: [[int(p), [float(x) for x in w]] for p, w in (history or initial_history(cfg))],
    }


def reweighted_history(cfg: PipelineConfig, saved: object, consumed: int, schedule_of) -> list:
    """The weight history of a pipeline restored after ``consumed`` global batches from a state whose history was
    ``saved``, with ``cfg``'s weights: ``saved`` itself when the weights are those in force, else ``saved`` up to
    the restore point plus ``[point, new weights]``.

    Args:
      schedule_of: ``schedule_of(history) -> (schedule, host)``: the global schedule and host dataset the
        pipeline has with a history (the restore point is found in the one that made the consumed batches).
    """
    try:
        if not isinstance(saved, (list, tuple)):  # the state's value as read: anything
            raise TypeError
        history: list[list] = [[int(p), [float(x) for x in w]] for p, w in saved]  # [position, weights]
    except (TypeError, ValueError):
        raise ValueError(f"state: {WEIGHTS_KEY} must be a list of [position, [weights]]; got {saved!r:.200}") from None
    weights = initial_history(cfg)[0][1]
    if not history or history[0][0] != 0 or any(len(w) != len(weights) for _, w in history):
        raise ValueError(f"state: {WEIGHTS_KEY} {history!r:.200} does not fit a mixture of {len(weights)} sources")
    if history[-1][1] == weights:
        return history
    schedule, host = schedule_of(history)
    if cfg.num_epochs is not None and consumed >= len(host):
        return history  # the run is over: nothing is drawn any more
    epoch, j = host.locate(consumed)
    point = epoch * schedule.order.n + schedule.restart_position(epoch, j)
    return [e for e in history if e[0] < point] + [[point, weights]]
