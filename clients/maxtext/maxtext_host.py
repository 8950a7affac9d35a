"""One host of a multi-process MaxText run on CPU (started by test_maxtext.py, one process per host).

    python maxtext_host.py COORDINATOR N ID [--pipeline P.yaml] base.yml key=value ...

Joins ``jax.distributed`` (coordinator on loopback, N processes, this one ID), then runs MaxText's pre-training on
a datatools pipeline (``python -m datatools.integrations.maxtext``'s entry point). MaxText finds jax.distributed
already initialized; its own CPU initialization needs XPK's environment (JOB_INDEX, PROCESSES_IN_JOB, ...) and a
fixed port 1234, which a test on a shared machine cannot count on.
"""

from __future__ import annotations

import sys


def main() -> int:
    coordinator, n, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    import jax

    jax.distributed.initialize(coordinator_address=coordinator, num_processes=n, process_id=pid)
    assert (jax.process_index(), jax.process_count()) == (pid, n)
    from datatools.integrations.maxtext import main as run

    code = run(sys.argv[4:])
    jax.distributed.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
