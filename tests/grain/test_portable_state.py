"""Restoring a pipeline state: a state that is not one this pipeline saves is refused with ValueError/TypeError
naming what is wrong, before anything is read (issue 21 defect 6: an unknown key raised KeyError, positions 2.5 and
True were accepted)."""

from __future__ import annotations

import copy

import pytest

from conftest import random_docs, write_test_store
from datatools.pipeline import build, parse_config

MODES = {
    "planned": {"packing": {"ctx": 256}, "shuffle": {"kind": "full"}},
    "streaming": {"packing": {"ctx": 256, "mode": "streaming", "window": 16}},
    "bucketing": {"bucketing": {"num_buckets": 2, "tile": 64, "max_len": 256, "token_budget": 1024}},
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_test_store(tmp_path_factory.mktemp("state") / "store", random_docs(200, seed=3, max_len=300))


def saved(store, mode):
    cfg = parse_config({"source": {"path": str(store)}, "batch_size": 2, "seed": 1, "workers": 0, **MODES[mode]})
    it = iter(build(cfg))
    next(it)
    next(it)
    return cfg, it.get_state()


def int_leaves(state, path=()):
    """Paths of the integer leaves (positions, counts) of a state."""
    if isinstance(state, dict):
        for k, v in state.items():
            yield from int_leaves(v, (*path, k))
    elif isinstance(state, int) and not isinstance(state, bool):
        yield path


def replaced(state, path, value):
    out = copy.deepcopy(state)
    d = out
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    return out


@pytest.mark.parametrize("mode", list(MODES))
def test_a_state_with_an_unknown_key_is_a_value_error_naming_it(store, mode):
    cfg, state = saved(store, mode)
    for bad in ({**state, "bogus": 1}, {**state, "portable": {**state["portable"], "bogus": 1}}):
        with pytest.raises(ValueError, match="bogus"):
            iter(build(cfg)).set_state(bad)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_missing_key_is_a_value_error_naming_it(store, mode):
    cfg, state = saved(store, mode)
    key = next(iter(state["portable"]))
    with pytest.raises(ValueError, match=key):
        iter(build(cfg)).set_state({**state, "portable": {k: v for k, v in state["portable"].items() if k != key}})


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(
    "value, error", [(2.5, TypeError), (True, TypeError), ("3", TypeError), (None, TypeError), (-1, ValueError)]
)
def test_a_position_that_is_not_a_count_is_refused(store, mode, value, error):
    cfg, state = saved(store, mode)
    leaves = [("portable", *p) for p in int_leaves(state["portable"])]  # the identity is compared, not counted
    assert leaves
    for path in leaves:
        with pytest.raises(error, match=path[-1]):
            iter(build(cfg)).set_state(replaced(state, path, value))


@pytest.mark.parametrize("mode", list(MODES))
def test_a_valid_state_still_restores_exactly(store, mode):
    cfg, state = saved(store, mode)
    it = iter(build(cfg))
    it.set_state(copy.deepcopy(state))
    again = iter(build(cfg))
    again.set_state(state)
    for _ in range(3):
        a, b = next(it), next(again)
        assert all((a[k] == b[k]).all() for k in a)
