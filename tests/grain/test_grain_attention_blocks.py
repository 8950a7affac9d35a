"""The loader's attention transform adds both tile layouts, each equal to the kernel layer's."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools import materialize, pack_lengths
from datatools.grain.attention_blocks import AttentionBlocks
from datatools.kernels.attention_blocks import TILE_KEYS, block_pairs, tile_list


@settings(max_examples=20, deadline=None)
@given(lengths=st.lists(st.integers(1, 300), min_size=1, max_size=20), block=st.sampled_from([8, 16, 32]))
def test_attention_blocks_adds_both_layouts(lengths, block):
    lengths = np.asarray(lengths)
    batch = materialize(
        pack_lengths(lengths, 4 * block),
        np.arange(int(lengths.sum()), dtype=np.int32),
        np.concatenate(([0], np.cumsum(lengths))),
    )
    out = AttentionBlocks(block).map(batch)
    for key, value in batch.items():
        assert out[key] is value  # the batch itself is untouched
    want = {**block_pairs(batch["segment_ids"], block), **tile_list(batch["segment_ids"], block)}
    assert set(out) == set(batch) | set(want) and set(TILE_KEYS) <= set(out)
    for key, value in want.items():
        np.testing.assert_array_equal(out[key], value, err_msg=key)


@settings(max_examples=10, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(1, 200), min_size=1, max_size=8), min_size=2, max_size=5),
    block=st.sampled_from([8, 32]),
)
def test_attention_blocks_as_a_map_on_batches_is_the_same_anywhere(rows, block):
    """As a map on a MapDataset of whole batches (how the pipeline runs it, before Grain's worker processes): batch
    j's tiles are a function of batch j alone, the same in any read order and after the pickle round trip that
    hands the dataset to a worker process."""
    import pickle

    import grain

    batches = []
    for lengths in rows:
        lengths = np.asarray(lengths)
        batches.append(
            materialize(
                pack_lengths(lengths, 4 * block),
                np.arange(int(lengths.sum()), dtype=np.int32),
                np.concatenate(([0], np.cumsum(lengths))),
            )
        )
    ds = grain.MapDataset.source(batches).map(AttentionBlocks(block))
    shipped = pickle.loads(pickle.dumps(ds))
    for j in reversed(range(len(batches))):
        want = AttentionBlocks(block).map(batches[j])
        for got in (ds[j], shipped[j]):
            assert set(got) == set(want)
            for key, value in want.items():
                np.testing.assert_array_equal(got[key], value, err_msg=key)
