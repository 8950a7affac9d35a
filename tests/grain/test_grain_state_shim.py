"""The Grain state shim against the installed Grain: a real iterator's state (in-process or mp_prefetch workers)
made portable restores into a fresh iterator with another worker count and gives the same next elements; the
states the shim writes are the ones Grain itself saves; a state of another form is refused naming the Grain."""

from __future__ import annotations

import numpy as np
import pytest
from absl import flags

import grain
from datatools.base.errors import UnsupportedVersion
from datatools.grain import grain_state_shim as shim
from datatools.grain.portable_state import MARK, PortableStateIterDataset, localized, portable

ELEMENTS = 24


def pipeline(workers: int) -> grain.IterDataset:
    """Batches of 3 of range(72) (elements are arrays), read in ``workers`` processes (0: in process)."""
    ds = grain.MapDataset.range(3 * ELEMENTS).batch(3).to_iter_dataset()
    if workers:
        if not flags.FLAGS.is_parsed():  # Grain's workers read absl flags, never parsed outside an absl app
            flags.FLAGS.mark_as_parsed()
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return ds


def take(it, n: int) -> list[list[int]]:
    return [np.asarray(next(it)).tolist() for _ in range(n)]


def close(it) -> None:
    getattr(it, "close", lambda: None)()


@pytest.mark.parametrize("saved, restored", [(2, 0), (0, 3), pytest.param(2, 3, marks=pytest.mark.slow)])
def test_a_state_restores_with_another_worker_count(saved, restored):
    it = iter(PortableStateIterDataset(pipeline(saved)))
    first = take(it, 5)
    state = it.get_state()
    want = take(it, 4)
    close(it)
    assert state["portable"] == {MARK: 5}  # the elements read, whatever the worker count
    fresh = iter(PortableStateIterDataset(pipeline(restored)))
    fresh.set_state(state)
    got = take(fresh, 4)
    close(fresh)
    assert got == want and first + want == [list(range(3 * i, 3 * i + 3)) for i in range(9)]


def test_the_states_the_shim_writes_are_grains_own():
    """After k elements Grain's mp_prefetch state is exactly prefetch_state(k, W), and its single-process state
    single_state(k): the shim's assumptions hold for the installed Grain."""
    it = iter(pipeline(2))
    take(it, 5)
    state = it.get_state()
    close(it)
    assert shim.is_prefetch_state(state) and shim.prefetch_workers(state) == 2
    assert shim.prefetch_position(state) == 5
    assert shim.prefetch_state(5, 2) == state
    assert portable(state) == {MARK: 5} and localized({MARK: 5}, state) == state
    single = iter(pipeline(0))
    take(single, 7)
    assert single.get_state() == shim.single_state(7) and shim.single_position(single.get_state()) == 7


@pytest.mark.parametrize("position, workers", [(0, 1), (5, 2), (7, 3), (100, 4)])
def test_positions_round_trip_through_any_worker_count(position, workers):
    state = shim.prefetch_state(position, workers)
    assert shim.prefetch_position(state) == position and shim.prefetch_workers(state) == workers
    per_worker = [w[shim.NEXT_INDEX] for w in state["iterators_in_use_states"]]
    assert max(per_worker) - min(per_worker) <= 1 and state["next_index_in_cycle"] == position % workers


def test_a_state_of_another_form_names_the_installed_grain():
    state = shim.prefetch_state(5, 2)
    with pytest.raises(UnsupportedVersion, match=f"Grain {shim.grain_version()}: .*unknown key.*'new_key'"):
        portable({**state, "new_key": 1})
    odd = {**state, "iterators_in_use_states": [{"next_index": 2, "epoch": 0}, {"next_index": 3}]}
    with pytest.raises(UnsupportedVersion, match="grain_state_shim.py"):
        portable(odd)
    with pytest.raises(ValueError, match="pending worker states"):
        portable({**state, "future_states": {"0": {}}})
