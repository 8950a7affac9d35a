"""One of several JAX processes (``jax.distributed`` on loopback, one CPU device each) running Levanter's own data
loader over a datatools pipeline (run by test_levanter.py, one subprocess per host).

The data path is Levanter's: ``data_config(...).train_set`` (its mixture over the ``DirectDatasetComponent``)
-> ``DataLoader`` over a mesh of every process's device with the batch on the ``data`` axis -> the global
batch arrays of each step (``jax.make_array_from_callback``: each process fills only its own devices' slots).
Writes JSON per process: which slots of each step its devices hold, the rows of the pipeline it read (global
batch, lo, hi), the bytes of tokens its document source delivered, and a CRC-32 of each of its examples' tokens
(``--train``: also the losses of a few training steps of a tiny Llama, data parallel over the processes).
"""

from __future__ import annotations

import argparse
import json
import zlib
from pathlib import Path

import jax


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--process", type=int, required=True)
    ap.add_argument("--processes", type=int, required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()

    jax.distributed.initialize(args.coordinator, num_processes=args.processes, process_id=args.process)
    import numpy as np
    from haliax import Axis
    from jax.sharding import Mesh
    from levanter.data.loader import DataLoader
    from levanter.schedule import BatchSchedule

    from datatools.integrations.levanter import data_config
    from datatools.io.storage import read_stats

    data = data_config(args.pipeline, vocab_size=1024)
    dataset = data.components["datatools"].datasets["train"]
    train_set = data.train_set(
        Axis("position", dataset.seq_len), BatchSchedule(args.batch_size), key=jax.random.PRNGKey(0)
    )
    mesh = Mesh(np.array(jax.devices()).reshape(-1, 1), ("data", "model"))
    loader = DataLoader(
        train_set,
        args.batch_size,
        mesh=mesh,
        axis_resources={"batch": "data"},
        max_buffered_batches=0,
        fetch_batch_size=args.steps,
    )
    dataset.source.reads.clear()  # the loader read element 0 to learn the examples' shape
    before = read_stats.snapshot()
    slots = {
        step: sorted(i for r in loader.local_data_indices_by_device_for_step(step).values() for i in r)
        for step in range(args.steps)
    }
    crcs = []
    for _, batch in zip(range(args.steps), loader.iter_from_step(0)):
        tokens = batch.tokens.array
        mine = [np.asarray(s.data) for s in tokens.addressable_shards]
        crcs.append([zlib.crc32(row.astype(np.int32).tobytes()) for shard in mine for row in shard])
    delivered = read_stats.subtract(read_stats.snapshot(), before).bytes_delivered
    Path(args.out).write_text(
        json.dumps(
            {
                "process": jax.process_index(),
                "processes": jax.process_count(),
                "slots": slots,
                "reads": dataset.source.reads,
                "bytes_delivered": delivered,
                "crcs": crcs,
            }
        )
    )
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
