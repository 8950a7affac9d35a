"""Checkpoints that restore with any number of prefetch workers, and on any number of hosts.

Grain's ``mp_prefetch`` saves one read position per worker (a state saved with 2 workers does not restore with 0
or 4: ``KeyError: 'next_index'``). :class:`PortableStateIterDataset` saves each as the elements read
(``{"elements_read": k}``) and converts it back on restore, the rest of the state kept; host batches count global
batches, so the state restores on any number of hosts (:func:`host_state`). The state records the pipeline's
``identity`` (seed, packing, batch size, the data's lengths, ...): restoring into another raises ValueError naming
what differs, unless only ``reweightable`` entries (a mixture's weights) differ: then ``reweight`` builds the
pipeline that continues from that state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import grain
from datatools.base.checks import short_repr
from datatools.grain import grain_state_shim as shim

MARK = "elements_read"  # the portable position: elements read from the prefetched dataset

Identity = dict[str, Any]  # a pipeline's identity: plain values (seed, packing, ...) by name
# reweight(saved identity, position) -> (the dataset that continues from there, its identity)
Reweight = Callable[[Identity, int], tuple[grain.IterDataset, Identity | None]]


def portable(state: object) -> object:
    """``state`` with every read position (Grain's, per worker: :mod:`~datatools.grain.grain_state_shim`)
    replaced by the elements read so far."""
    if isinstance(state, dict):
        if shim.is_prefetch_state(state):
            return {MARK: shim.prefetch_position(state)}
        if shim.is_single_state(state):
            return {MARK: shim.single_position(state)}
        return {k: portable(v) for k, v in state.items()}
    return state


def localized(state: object, like: object) -> object:
    """A portable ``state`` in the form of ``like`` (a state of the pipeline being restored)."""
    if isinstance(state, dict) and set(state) == {MARK}:
        k = state[MARK]
        if isinstance(like, dict) and shim.is_prefetch_state(like):
            return shim.prefetch_state(k, shim.prefetch_workers(like))
        return shim.single_state(k)
    if isinstance(state, dict) and isinstance(like, dict):
        return {k: localized(v, like.get(k)) for k, v in state.items()}
    return state


def differing_keys(saved: Identity | None, current: Identity | None) -> set[str]:
    """The identity keys whose values differ (none when either identity is missing)."""
    if not saved or not current:
        return set()
    return {k for k in set(saved) | set(current) if saved.get(k) != current.get(k)}


def check_identity(saved: Identity | None, current: Identity | None) -> None:
    """ValueError naming every key whose value differs between a saved state's pipeline identity and this one's."""
    keys = sorted(differing_keys(saved, current))
    if keys:
        old, new = saved or {}, current or {}
        diff = "; ".join(f"{k}: saved {old.get(k)!r}, this pipeline {new.get(k)!r}" for k in keys)
        raise ValueError(
            f"this state was saved by a pipeline with another config or data and cannot restore here ({diff})"
        )


def check_state(state: object, like: object, where: str) -> None:
    """``state`` must have the form of ``like`` (the portable state this pipeline saves): the same keys at every
    level, a count (an int >= 0, not a bool) or a string where ``like`` holds one; else a TypeError or ValueError
    naming the entry."""
    if isinstance(like, dict):
        if not isinstance(state, dict):
            raise TypeError(f"{where} must be a dict with keys {', '.join(map(repr, like))}; got {short_repr(state)}")
        unknown, missing = sorted(map(repr, set(state) - set(like))), sorted(map(repr, set(like) - set(state)))
        problems = [
            f"{what} key(s) {', '.join(keys)}" for what, keys in (("unknown", unknown), ("missing", missing)) if keys
        ]
        if problems:
            raise ValueError(f"{where}: {'; '.join(problems)} (this pipeline's state has {', '.join(map(repr, like))})")
        for k, v in like.items():
            check_state(state[k], v, f"{where}[{k!r}]")
    elif isinstance(like, bool):
        if not isinstance(state, bool):
            raise TypeError(f"{where} must be True or False, got {short_repr(state)}")
    elif isinstance(like, int):
        if isinstance(state, bool) or not isinstance(state, int):
            raise TypeError(f"{where} must be an integer count, got {short_repr(state)}")
        if state < 0:
            raise ValueError(f"{where} must be >= 0, got {state}")
    elif isinstance(like, str) and not isinstance(state, str):
        raise TypeError(f"{where} must be a string, got {short_repr(state)}")


def host_state(states: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The state to restore on every host (any host count) from the states all hosts saved at the same step;
    ValueError when the list is empty or a host's state differs from host 0's (naming it)."""
    states = list(states)
    if not states:
        raise ValueError("no host states given")
    for h, s in enumerate(states[1:], 1):
        if s != states[0]:
            raise ValueError(
                f"host {h}'s state differs from host 0's ({s!r} vs {states[0]!r}): save every host's "
                f"state at the same step of the same pipeline"
            )
    return states[0]


class _PortableStateIterator(grain.DatasetIterator):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    def __init__(
        self,
        parent: grain.DatasetIterator,
        identity: Identity | None,
        reweight: Reweight | None = None,
        reweightable: Iterable[str] = (),
    ) -> None:
        super().__init__(parent)
        self._identity = identity
        self._reading = parent  # the iterator read: the parent, or the pipeline a reweighting restore built
        self._reweight, self._reweightable = reweight, frozenset(reweightable)

    def __next__(self) -> object:
        return next(self._reading)

    def get_state(self) -> dict[str, object]:
        state: dict[str, object] = {"portable": portable(self._reading.get_state())}
        if self._identity:
            state["pipeline"] = dict(self._identity)
        return state

    def set_state(self, state: object) -> None:
        if not isinstance(state, dict) or "portable" not in state:
            raise ValueError(
                "not a datatools pipeline state (expected the dict get_state() returned, with a 'portable' entry)"
            )
        unknown = sorted(map(repr, set(state) - {"portable", "pipeline"}))
        if unknown:
            raise ValueError(
                f"not a datatools pipeline state: unknown key(s) {', '.join(unknown)} (expected "
                f"'portable' and 'pipeline')"
            )
        saved = state.get("pipeline")
        changed = differing_keys(saved, self._identity)
        if not changed or not changed <= self._reweightable or self._reweight is None:
            check_identity(saved, self._identity)
        current = self._reading.get_state()
        check_state(state["portable"], portable(current), "state['portable']")
        if changed and changed <= self._reweightable and self._reweight is not None and saved is not None:
            # (a change means both identities are there: saved is never None here)
            position = state["portable"].get(MARK) if isinstance(state["portable"], dict) else None
            if not isinstance(position, int) or len(state["portable"]) != 1:
                raise ValueError(
                    f"this state changes {', '.join(sorted(changed))} at a restore, which needs a "
                    f"read position alone; got {short_repr(state['portable'])}"
                )
            dataset, identity = self._reweight(saved, position)
            reading = dataset.__iter__()
            self._close(self._reading)
            self._reading, self._identity = reading, identity
            current = reading.get_state()
        self._reading.set_state(localized(state["portable"], current))

    @staticmethod
    def _close(it: object) -> None:
        close = getattr(it, "close", None)
        if close is not None:
            close()

    def close(self) -> None:
        if self._reading is not self._parent:
            self._close(self._reading)
        self._close(self._parent)


class PortableStateIterDataset(grain.IterDataset):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """The parent's elements unchanged; its iterator's state restores with any number of prefetch workers.

    Args:
      parent: the pipeline's final dataset.
      identity: what fixes the pipeline's element sequence (plain values by name); saved in every state and
        compared on restore.
      reweight: ``reweight(saved_identity, position) -> (dataset, identity)``: the pipeline that continues a state
        whose identity differs from this one in ``reweightable`` keys only (see the module docstring).
      reweightable: the identity keys that may differ at a restore when ``reweight`` is given.
    """

    def __init__(
        self,
        parent: grain.IterDataset,
        identity: Identity | None = None,
        *,
        reweight: Reweight | None = None,
        reweightable: Iterable[str] = (),
    ) -> None:
        super().__init__(parent)
        self.identity = dict(identity) if identity else None
        self.reweight, self.reweightable = reweight, tuple(reweightable)

    def __iter__(self) -> _PortableStateIterator:
        return _PortableStateIterator(self._parent.__iter__(), self.identity, self.reweight, self.reweightable)

    def __str__(self) -> str:
        return "PortableStateIterDataset"
