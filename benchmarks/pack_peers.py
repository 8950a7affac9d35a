"""The packing peers that need torch, run inside their own venv (``make bench-peers`` makes .clients/peers).

Called by benchmarks/pack.py as ``.clients/peers/bin/python benchmarks/pack_peers.py LENGTHS.npy CTX REPEATS``;
prints one JSON object: per peer, the median seconds over REPEATS, rows and real tokens. Imports no datatools.

* ``olmo-core OBFD`` (plan only): ``olmo_core.data.utils.InstancePacker.pack_documents`` on the (start, end)
  indices of the documents, pre-cut to ctx (its own ``fragment`` strategy's pieces), as OLMo-core's
  ``pack_documents_into_instances`` calls it: lists of document ids per instance, no tokens.
* ``trl pack_dataset bfd_split`` (rows built): ``trl.data_utils.pack_dataset(strategy="bfd_split")`` on a
  ``datasets.Dataset`` of ``input_ids``: packed ``input_ids`` (unpadded) and ``seq_lengths`` per row, in Arrow;
  its BFD runs inside each ``datasets.map`` batch (1000 documents by default).

``pack_peers.py --rows CORPUS.npz CTX BATCH MAX_DOCS``: TRL like for like, for benchmarks/pack.py's rows-built
table (one JSON line: CPU and wall seconds, rows, real tokens, peak MiB of the timed run). The documents' real token
ids as a ``datasets.Dataset`` of ``input_ids`` (TRL's native form, made before the clock), then inside the clock:
``pack_dataset(strategy="bfd_split")`` (it cuts documents longer than ctx itself) and, per batch of BATCH rows, the
step TRL leaves to the trainer's collator: each row padded to ctx with segment ids and positions from its
``seq_lengths`` (int32 ``tokens``, ``segment_ids``, ``positions``, as datatools and Grain give). An untimed
warm-up on the first 500 documents first.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def median(fn, repeats):
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), result


def trl_rows(ds, ctx: int, batch: int) -> tuple[int, int]:
    """TRL's packing, then batches of padded rows with segment ids and positions (the collator's step)."""
    from trl.data_utils import pack_dataset

    packed = pack_dataset(ds, ctx, strategy="bfd_split", map_kwargs={"keep_in_memory": True})
    rows = real = 0
    for lo in range(0, len(packed), batch):
        part = packed[lo : lo + batch]
        n = len(part["input_ids"])
        tokens = np.zeros((n, ctx), np.int32)
        segments = np.zeros((n, ctx), np.int32)
        positions = np.zeros((n, ctx), np.int32)
        for i, (ids, seq) in enumerate(zip(part["input_ids"], part["seq_lengths"], strict=True)):
            k = len(ids)
            tokens[i, :k] = ids
            seq = np.asarray(seq, np.int64)
            segments[i, :k] = np.repeat(np.arange(1, seq.size + 1, dtype=np.int32), seq)
            starts = np.repeat(np.cumsum(seq) - seq, seq)
            positions[i, :k] = np.arange(k) - starts
            real += k
        rows += n
    return rows, real


def rows_main(npz: str, ctx: int, batch: int, max_docs: int) -> None:
    import resource

    import datasets

    datasets.disable_progress_bars()
    with np.load(npz) as z:
        tokens, lengths = z["tokens"], z["lengths"]
    if max_docs:
        lengths = lengths[:max_docs]
    offsets = np.concatenate(([0], np.cumsum(lengths)))

    def dataset(n):
        return datasets.Dataset.from_dict({"input_ids": [tokens[offsets[i] : offsets[i + 1]] for i in range(n)]})

    trl_rows(dataset(min(500, lengths.size)), ctx, batch)
    ds = dataset(lengths.size)
    with open("/proc/self/statm") as f:
        before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    c0, t0 = time.process_time(), time.perf_counter()
    rows, real = trl_rows(ds, ctx, batch)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"cpu_s": cpu, "wall_s": wall, "rows": rows, "real_tokens": real, "peak_mib": max(peak - before, 0) / 1024}
        )
    )


def main() -> None:
    if len(sys.argv) < 2:  # `make bench` runs every script: this one is run by pack.py, with its arguments
        print("pack_peers.py: run by benchmarks/pack.py in the peers venv (make bench-peers); nothing to do alone")
        return
    if sys.argv[1] == "--rows":
        rows_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return
    lengths = np.load(sys.argv[1])
    ctx, repeats = int(sys.argv[2]), int(sys.argv[3])
    out = {}
    try:
        from olmo_core.data.utils import InstancePacker

        ends = np.cumsum(lengths)
        starts = ends - lengths
        cut = [
            (s + a, min(s + a + ctx, e)) for s, e in zip(starts.tolist(), ends.tolist()) for a in range(0, e - s, ctx)
        ]
        indices = np.array(cut, dtype=np.uint64).reshape(-1, 2)

        def obfd():
            return InstancePacker(ctx).pack_documents(indices)

        secs, (instances, _, total) = median(obfd, repeats)
        out["olmo-core OBFD"] = {
            "seconds": secs,
            "rows": len(instances),
            "real_tokens": int(total),
            "mode": "plan-only",
        }
    except ImportError as e:
        out["olmo-core OBFD"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        import datasets
        from trl.data_utils import pack_dataset

        datasets.disable_progress_bars()
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        flat = np.ones(int(offsets[-1]), np.int32)
        ds = datasets.Dataset.from_dict({"input_ids": [flat[offsets[i] : offsets[i + 1]] for i in range(len(lengths))]})

        def trl():
            return pack_dataset(ds, ctx, strategy="bfd_split", map_kwargs={"keep_in_memory": True})

        secs, packed = median(trl, repeats)
        real = int(sum(sum(x) for x in packed["seq_lengths"]))
        out["trl pack_dataset bfd_split"] = {
            "seconds": secs,
            "rows": len(packed),
            "real_tokens": real,
            "mode": "rows-built",
        }
    except ImportError as e:
        out["trl pack_dataset bfd_split"] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
