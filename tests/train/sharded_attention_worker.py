"""Block-sparse attention sharded over 8 host-platform CPU devices (run by test_sharded_attention.py in a fresh
process: XLA_FLAGS must be set before jax starts):

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python sharded_attention_worker.py OUT.npz

Writes, for a packed batch as drawn and balanced: the sharded kernel's output and gradients, dense attention's,
the tiles each device executed and the tiles each device's rows hold (counted from the lengths)."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from datatools import materialize, pack_lengths
from datatools.kernels.attention_blocks import device_tile_lists, row_tiles
from datatools.kernels.balance import balance_key, balance_order
from datatools.train.attention import SPARSE_KEYS, dense_attention, sharded_blocksparse_attention

DEVICES, ROWS, CTX, BLOCK, HEADS, DIM = 8, 16, 256, 32, 2, 8


def main(out: str) -> None:
    jax.config.update("jax_enable_x64", False)
    assert jax.device_count() == DEVICES, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rng = np.random.default_rng(0)
    lengths = rng.lognormal(np.log(40), 1.2, 400).round().clip(1, 600).astype(np.int64)
    plan = pack_lengths(lengths, CTX)
    drawn = rng.permutation(plan.num_rows)[:ROWS]
    work = row_tiles(plan.row_splits, plan.length, BLOCK)[:, 1]
    tokens = np.add.reduceat(plan.length.astype(np.int64), plan.row_splits[:-1])
    balanced = drawn[balance_order(balance_key(work[drawn], tokens[drawn], CTX), DEVICES)]
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    flat = np.zeros(int(offsets[-1]), np.int32)
    q, k, v = (jnp.asarray(rng.standard_normal((ROWS, CTX, HEADS, DIM)), jnp.float32) for _ in range(3))
    segs = {
        name: materialize(plan, flat, offsets, rows=rows, check_values=False)["segment_ids"]
        for name, rows in (("drawn", drawn), ("balanced", balanced))
    }
    lists = {name: device_tile_lists(seg, BLOCK, DEVICES) for name, seg in segs.items()}
    width = max(x["tile_row"].shape[1] for x in lists.values())  # one shape: one program for both orders

    @jax.jit
    def sparse(q, k, v, seg, tiles):
        def loss(q, k, v):
            out, done = sharded_blocksparse_attention(q, k, v, seg, tiles, BLOCK, mesh, executed=True)
            return (out**2).sum(), (out, done)

        (_, (out, done)), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
        return out, done, jnp.stack(grads)

    @jax.jit
    def dense(q, k, v, seg):
        def loss(q, k, v):
            out = dense_attention(q, k, v, seg)
            return (out**2).sum(), out

        (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
        return out, jnp.stack(grads)

    result = {}
    for name, rows in (("drawn", drawn), ("balanced", balanced)):
        seg = jnp.asarray(segs[name])
        tiles = device_tile_lists(segs[name], BLOCK, DEVICES, width=width)
        got, done, grads = sparse(q, k, v, seg, {key: jnp.asarray(tiles[key]) for key in SPARSE_KEYS})
        ref, ref_grads = dense(q, k, v, seg)
        result[f"{name}_out"], result[f"{name}_ref"] = np.asarray(got), np.asarray(ref)
        result[f"{name}_grads"], result[f"{name}_ref_grads"] = np.asarray(grads), np.asarray(ref_grads)
        result[f"{name}_executed"] = np.asarray(done)
        result[f"{name}_counted"] = work[rows].reshape(DEVICES, -1).sum(axis=1)
        result[f"{name}_width"] = np.array(lists[name]["tile_row"].shape[1])  # its own width
    np.savez(out, **result)


if __name__ == "__main__":
    main(sys.argv[1])
