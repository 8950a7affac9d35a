"""New batches (and the copies of batches out of Grain workers' shared memory) reuse memory nobody holds any more
(faulting in fresh pages cost more than the fill, issue 31), and never memory a caller still holds: a batch, one
of its arrays, a view or a buffer of it (datatools/base/array_pool.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools import pack_lengths
from datatools.base import array_pool
from datatools.kernels.packing import materialize
from datatools.kernels.packing.materialize import new_batch

LENGTHS = np.random.default_rng(3).integers(1, 300, 400)
TOKENS = np.random.default_rng(4).integers(0, 50_000, int(LENGTHS.sum())).astype(np.uint16)
OFFSETS = np.concatenate(([0], np.cumsum(LENGTHS)))
PLAN = pack_lengths(LENGTHS, 256)


def address(batch: dict) -> int:
    return batch["tokens"].__array_interface__["data"][0]


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["keep", "keep a view", "keep a buffer", "drop"]), st.integers(0, 10**6)),
        min_size=1,
        max_size=30,
    )
)
def test_memory_a_caller_holds_is_never_written(steps):
    held: list[tuple[object, np.ndarray, dict]] = []  # (what the caller holds, its values as built, the rows)
    for action, pick in steps:
        if action == "drop":
            if held:
                held.pop(pick % len(held))
            continue
        rows = np.random.default_rng(pick).choice(PLAN.num_rows, 4, replace=False)
        batch = materialize(PLAN, TOKENS, OFFSETS, rows)
        if action == "keep":
            kept: object = batch
            value = batch["positions"].copy()
        elif action == "keep a view":
            kept = batch["positions"][1:, ::2]
            value = batch["positions"][1:, ::2].copy()
        else:
            kept = memoryview(batch["positions"])
            value = batch["positions"].copy()
        del batch
        held.append((kept, value, {}))
        for thing, want, _ in held:
            now = thing["positions"] if isinstance(thing, dict) else np.asarray(thing)
            np.testing.assert_array_equal(now, want)


def test_memory_nobody_holds_is_used_again_and_batches_are_canonical():
    first = new_batch(4, 256)
    where = address(first)
    assert all(a.shape == (4, 256) and a.dtype == np.int32 and a.flags.c_contiguous for a in first.values())
    del first
    again = new_batch(4, 256)
    assert address(again) == where  # released: reused
    other = new_batch(4, 256)
    assert address(other) != where  # ``again`` still holds it
    tokens = again["tokens"]
    del again
    assert address(new_batch(4, 256)) != where  # one array of the batch is still held
    del tokens
    assert address(new_batch(4, 256)) == where


def test_a_copy_is_a_plain_array_in_memory_nobody_holds():
    source = np.arange(24, dtype=np.int64).reshape(4, 6)[:, ::2]  # not contiguous
    first = array_pool.copy(source)
    assert type(first) is np.ndarray and first.flags.c_contiguous and first.dtype == source.dtype
    np.testing.assert_array_equal(first, source)
    kept = first.__array_interface__["data"][0]
    second = array_pool.copy(source + 1)
    assert second.__array_interface__["data"][0] != kept  # ``first`` is held
    np.testing.assert_array_equal(first, source)
    del first
    third = array_pool.copy(source + 2)
    assert third.__array_interface__["data"][0] == kept
    np.testing.assert_array_equal(second, source + 1)
