"""The packing peers that need torch, run inside their own venv (``make bench-peers`` makes .clients/peers).

Called by benchmarks/pack.py as ``.clients/peers/bin/python benchmarks/pack_peers.py LENGTHS.npy CTX REPEATS``;
prints one JSON object: per peer, the median seconds over REPEATS, rows and real tokens. Imports no datatools.

* ``olmo-core OBFD`` (plan only): ``olmo_core.data.utils.InstancePacker.pack_documents`` on the (start, end)
  indices of the documents, pre-cut to ctx (its own ``fragment`` strategy's pieces), as OLMo-core's
  ``pack_documents_into_instances`` calls it: lists of document ids per instance, no tokens.
* ``trl pack_dataset bfd_split`` (rows built): ``trl.data_utils.pack_dataset(strategy="bfd_split")`` on a
  ``datasets.Dataset`` of ``input_ids``: packed ``input_ids`` (unpadded) and ``seq_lengths`` per row, in Arrow;
  its BFD runs inside each ``datasets.map`` batch (1000 documents by default).
"""

from __future__ import annotations

import json
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


def main() -> None:
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
