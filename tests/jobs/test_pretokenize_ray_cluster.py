"""Pre-tokenizing on a real Ray cluster of two nodes (``ray start --head`` and ``ray start --address``), writing to
the S3 server on loopback, with the worker node killed mid-job: the store ends byte-identical to a local run.

Marked ``cluster`` (about a minute: two Ray nodes start): ``make test-cluster`` runs it, ``make test`` does not."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from ray_cluster import RayCluster

from datatools.io import storage
from datatools.jobs.pretokenize import pretokenize
from object_storage import object_bytes

pytestmark = pytest.mark.cluster
SHARDS = 12


@pytest.fixture()
def cluster(tmp_path, s3_bucket):
    """Head (1 CPU) + node ``worker`` (1 CPU), started with the S3 variables of the test in their environment (a
    real cluster's nodes get their storage credentials from their own environment, as here)."""
    c = RayCluster(Path(tempfile.mkdtemp(prefix="dtray", dir="/tmp"))).start_head()  # Unix sockets: <108 bytes
    try:
        c.add_node("worker")
        yield c
    finally:
        c.stop()


def test_two_node_cluster_with_a_worker_killed_writes_the_local_store(
    cluster, s3_bucket, tmp_path, texts, tokenizer_file
):
    many = texts * 6
    per = len(many) // SHARDS
    for i in range(SHARDS):
        lines = "".join(json.dumps({"text": t}) + "\n" for t in many[i * per : (i + 1) * per])
        storage.location(f"{s3_bucket}/in/part-{i:02d}.jsonl").write_text(lines)
    reference = tmp_path / "local"
    pretokenize(f"{s3_bucket}/in", reference, tokenizer_file, progress=False)

    out = f"{s3_bucket}/store"
    args = [
        sys.executable,
        "-m",
        "datatools",
        "pretokenize",
        f"{s3_bucket}/in",
        out,
        "--tokenizer",
        str(tokenizer_file),
        "--engine",
        "ray",
        "--ray-address",
        cluster.address,
        "--workers",
        "2",
    ]
    job = subprocess.Popen(args, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    done_at_kill = None
    while time.monotonic() < deadline and job.poll() is None:
        done = (
            len(storage.location(f"{out}.partial/shards").list()) if storage.location(f"{out}.partial").exists() else 0
        )
        if done >= 1:  # the job is under way on the cluster: preempt the worker node
            done_at_kill = done
            assert cluster.kill_node("worker") > 0
            break
        time.sleep(0.05)
    assert done_at_kill is not None and done_at_kill < SHARDS, "the job ended before the worker could be killed"
    job.communicate(timeout=300)
    if job.returncode != 0 or not storage.location(f"{out}/manifest.json").exists():  # Ray gave up: run it again
        cluster.add_node("worker2")
        rerun = subprocess.run(args, env=cluster.env, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert object_bytes(out) == object_bytes(reference)
    assert not storage.location(f"{out}.partial").list()
    final = subprocess.run(args, env=cluster.env, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0 and "already complete" in final.stderr, final.stderr[-2000:]
