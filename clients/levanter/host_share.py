"""The per-host byte check of test_levanter.py, without Levanter or JAX (tests/test_client_checks.py runs it in
``make test``): each JAX process's document source counted the bytes it delivered."""

from __future__ import annotations


def check_bytes_per_host(delivered: list[int]) -> None:
    """Each host delivered some bytes, and under half of all hosts' bytes (4 hosts: about a quarter each).

    ``delivered``: bytes of tokens each host's document source handed to batches (``read_stats``'s
    ``bytes_delivered``), one per host. A host whose counter reads 0 fails the check with that reason: the
    counter did not see the reads (or the host read nothing), so the check cannot tell whether the host read
    only its share; it is never taken as passing."""
    assert len(delivered) >= 2, f"the per-host byte check needs 2 or more hosts; got counters {delivered}"
    silent = [host for host, count in enumerate(delivered) if count <= 0]
    assert not silent, (
        f"hosts {silent}: the document source's bytes_delivered counter read {[delivered[h] for h in silent]} "
        f"(all hosts: {delivered}); the per-host byte check cannot run on counters that saw no reads"
    )
    total = sum(delivered)
    over = [host for host, count in enumerate(delivered) if count >= total / 2]
    assert not over, f"hosts {over} delivered half or more of all {total:,} bytes: {delivered}"
