"""docs/levanter.md run as printed, in Levanter's own venv (``make test-clients-levanter``).

The page's blocks are taken from the page itself (``tests/docs_blocks.py`` reads them), never copied: a cache
Levanter's own builder made (test_levanter.py's ``cache``) is uploaded to ``s3://my-bucket/tokenized/train`` on
moto's S3 server on loopback (the AWS variables point at it, as ``AWS_ENDPOINT_URL`` does for any S3-compatible
store); then, in one working directory, in the page's order: ``analyze-padding`` on the bucket, the YAML block
saved as ``levanter.yaml``, the check commands, the Python block saved as ``train_levanter.py``, and the page's
4-process command (its coordinator port replaced by a free one). Checked: the analyzer counts the cache's
documents; each of the 4 processes trains every step and logs the same loss as the others (one global batch);
each read a quarter of every batch's rows (after the one element Levanter's loader reads at start), and the four
together every row once. Then the page's resume: the same command with 2 more steps restores the 4 hosts' checkpoint
and trains only the 2 new steps, reading from that step's batch on (each host its quarter). Section 6 (a cache on
local disk) runs in a directory of its own, before the rest: its builder on the fixture's text and tokenizer makes a
cache with the documents the fixture's has, which ``analyze-padding`` and ``datatools pipeline`` read.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_levanter import cache, free_port, tokenizer_dir  # noqa: F401  (fixtures: Levanter's own cache)

from datatools.io import storage

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import docs_blocks  # noqa: E402
from object_storage import Server  # noqa: E402

PAGE = ROOT / "docs" / "levanter.md"
BUCKET, CACHE = "my-bucket", "s3://my-bucket/tokenized/train"
COORDINATOR = "127.0.0.1:12355"  # the page's; replaced by a free port
MOTO = ROOT / ".venv" / "bin" / "moto_server"  # moto[server] of datatools' dev venv (make install)


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    if not MOTO.exists():
        pytest.fail(f"{MOTO}: no moto_server (run make install: the dev venv holds moto[server])")
    port = free_port()
    server = Server("moto_server", [str(MOTO), "-H", "127.0.0.1", "-p", str(port)], port, tmp_path_factory.mktemp("m"))
    yield server
    server.stop()


def s3_env(url: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "eu-west-1",  # s3fs sends it as the LocationConstraint
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


def test_the_levanter_page_runs_as_printed(cache, tokenizer_dir, s3_server, tmp_path, monkeypatch):  # noqa: F811
    path, built = cache
    aws = s3_env(s3_server.url)
    for k, v in aws.items():
        monkeypatch.setenv(k, v)
    fs, _ = storage.location(f"s3://{BUCKET}").filesystem()
    fs.mkdir(BUCKET)
    files = sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        fs.pipe_file(f"{BUCKET}/tokenized/train/{f.relative_to(path).as_posix()}", f.read_bytes())
    print(f"uploaded {len(files)} files of Levanter's cache ({len(built)} documents) to {CACHE}")

    env = {**os.environ, **aws, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"}
    # Levanter's venv first on PATH: the page's `python` and `datatools`
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "work"
    work.mkdir()
    blocks = [b for b in docs_blocks.blocks(PAGE) if b.kind != "illustrative"]
    langs = ["bash", "yaml", "bash", "python", "bash", "python", "yaml", "bash"]
    assert [b.lang for b in blocks] == langs, [b.where for b in blocks]
    assert all(b.kind == "client" and b.args == ["levanter"] for b in blocks if b.lang != "yaml")
    analyze, config, check, script, launch, build_local, local_config, local_check = blocks

    def bash(block, text: str | None = None, timeout: int = 900, cwd: Path | None = None) -> str:
        proc = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + (text or block.text)],
            cwd=cwd or work,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, (
            f"{block.where}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        return proc.stdout + proc.stderr

    # section 6, a cache on local disk: the page's builder on the fixture's text and tokenizer, then its checks
    local = tmp_path / "local"
    local.mkdir()
    shutil.copytree(tokenizer_dir, local / "tokenizer")
    shutil.copyfile(path.parents[1] / "docs.jsonl", local / "docs.jsonl")
    (local / "build_cache.py").write_text(build_local.text)
    (local / "local.yaml").write_text(local_config.text)
    out = bash(local_check, cwd=local)
    print(out[-1500:])
    n = f"{len(built):,}"
    assert f"cache/train: {n} documents built, {n} read by datatools" in out
    assert out.count(n) >= 3  # and the analyzer counted them

    out = bash(analyze)
    print(out[-1500:])
    assert CACHE in analyze.text and f"{len(built):,}" in out  # the ledger's document count, read from the bucket
    (work / "levanter.yaml").write_text(config.text)
    assert f"path: {CACHE}" in config.text
    print(bash(check)[-2500:])
    (work / "train_levanter.py").write_text(script.text)

    assert COORDINATOR in launch.text
    steps = int(re.search(r"--steps (\d+)", launch.text).group(1))
    hosts = int(re.search(r"--num-processes (\d+)", launch.text).group(1))
    batch = int(re.search(r"^batch_size: (\d+)$", config.text, flags=re.M).group(1))

    def run_hosts(cwd: Path, steps_now: int) -> tuple[dict[int, dict[int, float]], dict[int, list]]:
        """The page's launch command (a free port; ``--steps`` as given) in ``cwd``: each process's losses by step
        (as it printed them) and the runs of rows it read (its ``--reads`` file)."""
        text = launch.text.replace(COORDINATOR, f"127.0.0.1:{free_port()}")
        text = text.replace(f"--steps {steps}", f"--steps {steps_now}")
        out = bash(launch, text, timeout=1500, cwd=cwd)
        losses: dict[int, dict[int, float]] = {}
        # the 4 processes share one pipe: a line may start after another's output
        for p, s, loss in re.findall(r"process (\d+) step (\d+) loss ([-+\d.eE]+|nan|inf)", out):
            losses.setdefault(int(p), {})[int(s)] = float(loss)
        done = {int(p): int(n) for p, n in re.findall(rf"process (\d+) of {hosts} read (\d+) rows", out)}
        reads = {p: json.loads((cwd / f"reads-{p}.json").read_text()) for p in range(hosts)}
        print("losses by process", losses)
        print("rows read by process", done, "batches", [len({j for j, _, _ in r}) for r in reads.values()])
        print("first reads by process", {p: r[:4] for p, r in reads.items()})
        assert sorted(done) == list(range(hosts)), out[-6000:]  # every process ran to its end
        assert all(done[p] == sum(hi - lo for _, lo, hi in reads[p]) for p in range(hosts))
        assert sorted(losses) == list(range(hosts)), out[-6000:]
        return losses, reads

    losses, reads = run_hosts(work, steps)

    # every process trained every step, and all log the same loss: one global batch, one model
    for p in range(hosts):
        assert sorted(losses[p]) == list(range(steps))
        assert all(math.isfinite(x) for x in losses[p].values())
        assert losses[p] == losses[0]

    # each host read its quarter of each batch, the four every row once, after the one element the loader reads at
    # start (the same row on every host: element 0, which Levanter's mixture maps to a row of batch 0)
    share = batch // hosts
    first = {tuple(reads[p][0]) for p in range(hosts)}
    assert len(first) == 1 and next(iter(first))[0] == 0 and next(iter(first))[2] - next(iter(first))[1] == 1, first
    runs = {p: reads[p][1:] for p in range(hosts)}
    for j in range(steps):
        rows = [[i for b, lo, hi in runs[p] if b == j for i in range(lo, hi)] for p in range(hosts)]
        assert [len(x) for x in rows] == [share] * hosts, (j, rows)
        assert sorted(i for x in rows for i in x) == list(range(batch))
    for j in {b for p in range(hosts) for b, _, _ in runs[p]}:  # batches the loader read ahead: still only shares
        rows = [[i for b, lo, hi in runs[p] if b == j for i in range(lo, hi)] for p in range(hosts)]
        assert all(len(x) <= share for x in rows) and len({i for x in rows for i in x}) == sum(map(len, rows)), j

    # resuming, as the page says: the same command run again (here with 2 more steps) restores the 4 hosts'
    # checkpoint of the first run's end, trains only the new steps, and reads from that step's batch on, each host its
    # share. (Its losses are not an uninterrupted run's: the learning-rate schedule spans --steps, so a rerun with
    # more steps changes it; a rerun after a stop keeps --steps.)
    more = steps + 2
    resumed, resumed_reads = run_hosts(work, more)
    for p in range(hosts):
        assert sorted(resumed[p]) == list(range(steps, more))  # restored at step `steps`, not trained again
        assert resumed[p] == resumed[0] and all(math.isfinite(x) for x in resumed[p].values())
        assert resumed_reads[p][0] == reads[p][0]  # the element read at start, then batch `steps` on
        assert min(b for b, _, _ in resumed_reads[p][1:]) == steps
    for j in range(steps, more):
        rows = [[i for b, lo, hi in resumed_reads[p][1:] if b == j for i in range(lo, hi)] for p in range(hosts)]
        assert [len(x) for x in rows] == [share] * hosts, (j, rows)
        assert sorted(i for x in rows for i in x) == list(range(batch))
