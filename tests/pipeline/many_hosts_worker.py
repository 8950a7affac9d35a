"""One host of a many-host pipeline test (run by tests/pipeline/test_many_hosts.py, one process per host).

    python many_hosts_worker.py COORDINATOR N ID CONFIGS_JSON OUT_DIR [RESTORE_DIR]

Joins ``jax.distributed`` (CPU, coordinator on loopback); for each named config of CONFIGS_JSON (a mapping
name -> pipeline config) builds the pipeline with ``shard: auto`` (so the host comes from
jax.process_index()/process_count()), optionally restores the state host 0 saved in RESTORE_DIR, runs the epoch
and writes its batches (``OUT_DIR/{name}_host{ID}.npz``) and its state after SAVE_AT steps
(``OUT_DIR/{name}_state{ID}.json``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SAVE_AT = 3


def main() -> None:
    coordinator, n, pid, configs, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], Path(sys.argv[5])
    import jax

    jax.distributed.initialize(coordinator_address=coordinator, num_processes=n, process_id=pid)
    assert (jax.process_index(), jax.process_count()) == (pid, n)

    import numpy as np

    from datatools.pipeline import build_canonical, parse_config

    for name, config in json.loads(configs).items():
        it = iter(build_canonical(parse_config({**config, "shard": "auto"})).dataset)
        if len(sys.argv) > 6:
            it.set_state(json.loads((Path(sys.argv[6]) / f"{name}_state0.json").read_text()))
        batches = []
        for step, batch in enumerate(it):
            batches.append(batch)
            if step + 1 == SAVE_AT:
                (out / f"{name}_state{pid}.json").write_text(json.dumps(it.get_state()))
        np.savez(
            out / f"{name}_host{pid}.npz",
            **{f"{k}_{j}": v for j, b in enumerate(batches) for k, v in b.items()},
            steps=np.asarray(len(batches)),
        )
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
