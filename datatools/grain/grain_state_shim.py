"""Shim: the read position inside Grain's iterator states (the one place datatools reads Grain's state keys).

Checked against Grain 0.2.10 to 0.2.18 (:data:`TESTED_GRAIN`): a single-process iterator over a map dataset saves
``{"next_index": k}`` (``k`` elements read); ``mp_prefetch`` with ``W`` workers saves :data:`MP_KEYS`: worker ``i``
reads elements ``i, i + W, ...``, its position is ``iterators_in_use_states[i]["next_index"]``, and the next
element comes from worker ``next_index_in_cycle``. A state of another form is an
:class:`~datatools.base.errors.UnsupportedVersion` error naming the installed Grain, never a wrong position.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from datatools.base.errors import UnsupportedVersion

TESTED_GRAIN = ((0, 2, 10), (0, 2, 18))  # the Grain versions this shim was checked against (inclusive)
NEXT_INDEX = "next_index"  # a single-process iterator's position: elements read
MP_KEYS = frozenset(
    {
        "next_index_in_cycle",
        "next_index_in_datasets",
        "iterators_in_use_indices",
        "iterators_in_use_states",
        "exhausted",
    }
)  # what marks an mp_prefetch state
MP_OPTIONAL = frozenset({"future_states"})  # states in flight; must be empty to read a position


def grain_version() -> str:
    """The installed Grain's version (``"unknown"`` when its metadata is missing)."""
    try:
        return metadata.version("grain")
    except metadata.PackageNotFoundError:
        return "unknown"


def _unsupported(what: str) -> UnsupportedVersion:
    lo, hi = (".".join(map(str, v)) for v in TESTED_GRAIN)
    return UnsupportedVersion(
        f"Grain {grain_version()}: {what}; datatools reads Grain's iterator states as Grain "
        f"{lo} to {hi} writes them (datatools/grain/grain_state_shim.py): install a Grain in "
        f"that range, or update the shim"
    )


def is_single_state(state: object) -> bool:
    """Whether ``state`` is a single-process iterator's position ``{"next_index": k}``."""
    return isinstance(state, dict) and set(state) == {NEXT_INDEX}


def is_prefetch_state(state: object) -> bool:
    """Whether ``state`` is an ``mp_prefetch`` iterator's state (it holds every key of :data:`MP_KEYS`)."""
    return isinstance(state, dict) and MP_KEYS <= set(state)


def single_position(state: dict[str, Any]) -> int:
    """Elements read, from a single-process state."""
    k = state[NEXT_INDEX]
    if isinstance(k, bool) or not isinstance(k, int):
        raise _unsupported(f"a single-process state's {NEXT_INDEX} is {k!r}, not a count")
    return k


def prefetch_position(state: dict[str, Any]) -> int:
    """Elements read, from an ``mp_prefetch`` state: the sum of the workers' positions.

    Raises:
      ValueError: the state holds pending worker states (saved mid-flight: no single position).
      UnsupportedVersion: the state is not of the form this shim knows.
    """
    extra = set(state) - MP_KEYS - MP_OPTIONAL
    if extra:
        raise _unsupported(f"an mp_prefetch state has unknown key(s) {', '.join(sorted(map(repr, extra)))}")
    if state.get("future_states"):
        raise ValueError("this pipeline state holds pending worker states and cannot be made portable")
    workers = state["iterators_in_use_states"]
    if not isinstance(workers, list) or not all(is_single_state(w) for w in workers):
        raise _unsupported(f"an mp_prefetch state's workers are {workers!r}, not [{{{NEXT_INDEX!r}: k}}, ...]")
    return int(sum(single_position(w) for w in workers))


def prefetch_workers(state: dict[str, Any]) -> int:
    """Workers of an ``mp_prefetch`` state."""
    return len(state["iterators_in_use_states"])


def prefetch_state(position: int, workers: int) -> dict[str, Any]:
    """The ``mp_prefetch`` state of ``workers`` workers that has read ``position`` elements."""
    if workers < 1:
        raise _unsupported(f"an mp_prefetch state with {workers} workers")
    return {
        "next_index_in_cycle": position % workers,
        "next_index_in_datasets": workers,
        "iterators_in_use_indices": list(range(workers)),
        "iterators_in_use_states": [
            {NEXT_INDEX: position // workers + (1 if i < position % workers else 0)} for i in range(workers)
        ],
        "exhausted": [0] * workers,
        "future_states": {},
    }


def single_state(position: int) -> dict[str, Any]:
    """The single-process state that has read ``position`` elements."""
    return {NEXT_INDEX: position}
