"""Feeding every step from a bucket: a token store in S3 behind a slow link, read by the users' pipeline.

The users' shape (issue 31): a token store of ``--tokens`` (default 500M) tokens, documents of lognormal length
(median 400, mean ~800, at most 8192: ``benchmarks/_common`` distribution (c)), random token ids below 50,257
(uint16: incompressible, as real token ids nearly are), in moto's S3 API server on loopback behind
:class:`~datatools.testing.slow_proxy.SlowProxy`: ``+0``, ``+30`` and ``+100`` ms per request and 50 MB/s per
connection. The pipeline: ctx 8192, global batch 128, streaming packing (best fit decreasing, windows of 1024
documents), block shuffle 64 x 1024 (read in lanes), as 1 host, host 0 of 4 and host 0 of 16, each host's reads
issued by its one reader (``datatools.grain.host_reader``); a row with planned packing and a full shuffle (every
document anywhere: what it costs in bytes); and with ``--tail``, a row where 1% of requests (every 100th) wait 1 s
more.

Each row runs in a fresh process (peak RSS of the process and its workers, sampled every 0.1 s):

* **first batch**: seconds from the start (config -> dataset, open the store, read the offsets) to the first
  batch; and the bytes fetched before it;
* **batches/s**: ``--batches`` batches after the first, taken as fast as they come (500 by default: about one
  epoch of the 500M-token store, whose global batches are 477 an epoch; a lane reads its window whole when its
  first row is needed, so over a part of an epoch the windows begun and not used up count as fetched and not
  delivered: host 0 of 4 fetched 1.93-2.16x over 150 batches, ~1.8x over 500); ``--full-batches`` (40) for the
  full shuffle, at ~0.3 batches/s;
* **steps waited**: a second pipeline, ``--steps`` steps of a simulated ``--step-time`` s step each (the
  consumer sleeps): the steps whose ``next()`` took more than 10 ms (the first step excluded);
* **fetched / delivered**: bytes through the proxy (the wire, HTTP headers included) over the bytes of the
  tokens the batches hold; **requests per batch** counted at the proxy; and over the first 30 batches (the first
  included: what was read ahead by then counts), the reader's own counts (decoded bytes of the extents it read over
  the bytes of the pieces it handed over);
* **late reads**: extents a batch read that the read-ahead had not asked for before it was built (counted by the
  reader; 0 when every read was issued ahead);
* **bound**: a computed bound for the first batch: ``max((3 + ceil(requests / 64)) x latency, 3 x latency +
  requests / floor rate) + bytes / (50 MB/s x min(64, requests))`` with the first batch's requests and bytes counted
  at the proxy (the manifest, then the offsets and shard indices, then the pieces, 64 reads in flight, at most as
  fast as the server answers plain concurrent GETs: the floor's requests/s, measured in the same run);
* **floor**: the physical floor in the same run: the same number of ranged GETs of the store's inner chunks
  (the byte ranges a read of the rows' documents needs, from the shard indices), fetched by a plain loop of
  32 concurrent connections (boto3, one client per thread) through the same proxy: requests per second, and
  so the batches per second the link allows at the pipeline's requests per batch.

``--layout levanter`` writes the same documents as a Levanter cache and runs moto with ranged GETs that read
only their range (``benchmarks/_moto_ranged.py``): plain moto reads a whole object per GET, ~7 GETs/s on a
Levanter shard of ~250 MB, which measured moto rather than the reader.

Usage::

    python benchmarks/remote_read.py [--tokens 500000000] [--latencies 0 30 100] [--steps 500] [--batches 500]
    python benchmarks/remote_read.py --tokens 20000000 --steps 40 --batches 10 --full-batches 4  # a quick look
    python benchmarks/remote_read.py --latencies 100 --only 2 --restore-at 200  # a restart mid-epoch
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import announce, lognormal_lengths, print_table, write_json  # noqa: E402
from read import S3_ENV, s3_server  # noqa: E402

MB = 1e6
EARLY = 30  # batches over which the early fetched / delivered is counted (the reader's counts, from the start)
VOCAB = 50257
BANDWIDTH = 50e6  # bytes/s per connection
BUCKET = "remote-read-bench"
MODES = {
    "block, streaming (lanes)": {
        "shuffle": {"kind": "block", "io_block_size": 64, "window_blocks": 1024},
        "packing": {"mode": "streaming", "ctx": 8192, "window": 1024},
    },
    "full, planned": {
        "shuffle": {"kind": "full"},
        "packing": {"mode": "planned", "ctx": 8192},
    },
}


def build_store(url: str, tokens: int, seed: int = 0, write_seed: int | None = None) -> dict:
    """Write the store straight into the bucket (no proxy): documents until ``tokens`` tokens. ``write_seed``: the
    same documents in the order ``pretokenize --shuffle-seed write_seed`` writes them (its own code path,
    :func:`~datatools.jobs.write_order.shuffled_shards`, through a local spill file), recorded in the manifest."""
    try:
        from datatools.io.formats.store import token_dtype, write_order_record, write_store
    except ModuleNotFoundError:  # a baseline's code (local_read.py --baseline): before io's floors and write orders
        from datatools.io.store import token_dtype, write_store  # type: ignore[no-redef]

        write_order_record = None  # type: ignore[assignment]

    n = int(tokens / 700)  # enough documents: the mean after clipping at 8192 is ~780
    lengths = lognormal_lengths(n, median=400, mean=800, low=1, high=8192, seed=seed)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    rng = np.random.default_rng(seed + 1)
    parts = [lengths[a : a + 50_000] for a in range(0, lengths.shape[0], 50_000)]
    dtype = token_dtype(VOCAB)

    def shards():
        for part in parts:
            yield rng.integers(0, VOCAB, int(part.sum()), dtype=np.uint16), part

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as spill_dir:
        if write_seed is None:
            written = shards()
        else:  # the ids drawn shard by shard as above, then written in the write order
            from datatools.jobs.write_order import shuffled_shards

            ids = [tokens for tokens, _ in shards()]
            spill = Path(spill_dir) / "order.bin"
            written = shuffled_shards(ids.__getitem__, parts, write_seed, spill, dtype)
        write_store(
            url,
            written,
            num_tokens=int(lengths.sum()),
            num_documents=int(lengths.shape[0]),
            dtype=dtype,
            manifest={"vocab_size": VOCAB}
            | ({} if write_order_record is None else {"write_order": write_order_record(write_seed)}),
        )
    return {"documents": int(lengths.shape[0]), "tokens": int(lengths.sum()), "write_s": time.perf_counter() - t0}


LEVANTER_INNER, LEVANTER_OUTER = 256 * 1024, 256 * 1024 * 512  # levanter.store.jagged_array's chunking


def _levanter_array(url: str, dtype) -> object:
    """One array of a Levanter cache as ``levanter.store.jagged_array._ts_open_sync`` creates it: zarr v3, shape
    2^54, outer chunks of 128 Mi elements sharded into inner chunks of 256 Ki, blosc-zstd level 1."""
    import tensorstore as ts

    from datatools.io.storage import location

    spec = {
        "driver": "zarr3",
        "kvstore": location(url).kvstore_spec(),
        "metadata": {
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [LEVANTER_OUTER]}},
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [LEVANTER_INNER],
                        "codecs": [{"name": "blosc", "configuration": {"cname": "zstd", "clevel": 1}}],
                    },
                }
            ],
        },
    }
    return ts.open(spec, create=True, dtype=np.dtype(dtype).name, shape=[2**54]).result()


def build_levanter_cache(url: str, tokens: int, seed: int = 0) -> dict:
    """The same documents as :func:`build_store` (same lengths, same ids) as a finished Levanter cache in the
    bucket: ``input_ids/{offsets,data}`` (int32 tokens, ``offsets[0]`` the row count) and ``shard_ledger.json``,
    written in Levanter's layout without Levanter (as ``tests/io/formats/test_levanter_cache.py`` does), one outer
    chunk (128 Mi tokens) at a time."""
    from datatools.io import storage

    n = int(tokens / 700)
    lengths = lognormal_lengths(n, median=400, mean=800, low=1, high=8192, seed=seed)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    rng = np.random.default_rng(seed + 1)
    t0 = time.perf_counter()
    data = _levanter_array(url.rstrip("/") + "/input_ids/data", np.int32)
    total = int(lengths.sum())
    ids = np.concatenate(
        [
            rng.integers(0, VOCAB, int(lengths[a : a + 50_000].sum()), dtype=np.uint16)
            for a in range(0, lengths.shape[0], 50_000)
        ]
    )  # the same ids as build_store draws, shard by shard
    for a in range(0, total, LEVANTER_OUTER):
        b = min(total, a + LEVANTER_OUTER)
        data[a:b].write(ids[a:b].astype(np.int32)).result()
    del ids
    offsets = np.concatenate(([lengths.shape[0]], np.cumsum(lengths))).astype(np.int64)
    _levanter_array(url.rstrip("/") + "/input_ids/offsets", np.int64)[: offsets.size].write(offsets).result()
    ledger = {
        "total_num_rows": int(lengths.shape[0]),
        "shard_rows": {"00000_data.jsonl": int(lengths.shape[0])},
        "is_finished": True,
        "finished_shards": ["00000_data.jsonl"],
        "field_counts": {"input_ids": total},
        "field_counts_by_shard": {},
        "layout": "consolidated",
        "metadata": {"preprocessor_metadata": {}},
    }
    storage.location(url).join("shard_ledger.json").write_text(json.dumps(ledger))
    return {"documents": int(lengths.shape[0]), "tokens": total, "write_s": time.perf_counter() - t0}


def config(url: str, mode: str, hosts: int) -> dict:
    return {
        "source": {"path": url},
        **MODES[mode],
        "batch_size": 128,
        "drop_remainder": True,
        "num_epochs": None,
        "workers": 0,
        "shard": {"index": 0, "count": hosts},
        "seed": 0,
        "format": "datatools",
    }


# --------------------------------------------------------------------------- one row, in a fresh process


def rss_sampler(stop: threading.Event, peak: list[int]) -> None:
    import psutil

    me = psutil.Process()
    while not stop.wait(0.1):
        try:
            total = me.memory_info().rss + sum(c.memory_info().rss for c in me.children(recursive=True))
        except psutil.Error:
            continue
        peak[0] = max(peak[0], total)


def child(spec: dict) -> dict:
    """One pipeline run: first batch, then batches as fast as they come (``batches``), or ``steps`` steps of
    ``step_s`` seconds; the proxy is asked for its counts by the parent around each phase (via stdout)."""
    from datatools.io.storage import read_stats
    from datatools.pipeline import build_canonical
    from datatools.pipeline.config import parse_config
    from datatools.pipeline.stalls import StallMeter

    peak = [0]
    stop = threading.Event()
    threading.Thread(target=rss_sampler, args=(stop, peak), daemon=True).start()
    t0 = time.perf_counter()
    built = build_canonical(parse_config(spec["config"]))
    build_s = time.perf_counter() - t0
    batches = iter(built.dataset)
    if spec.get("restore_at"):  # a checkpoint taken at that global batch, restored as a restart after preemption
        from datatools.grain.portable_state import MARK

        batches.set_state({**batches.get_state(), "portable": {MARK: spec["restore_at"]}})
    it = StallMeter(batches, stats_folder=built.stats_folder)
    batch = next(it)
    first_s = time.perf_counter() - t0
    delivered = [int(np.count_nonzero(batch["segment_ids"])) * 2]
    print(json.dumps({"event": "first"}), flush=True)
    sys.stdin.readline()  # the parent took the proxy's counts
    if spec["step_s"]:
        time.sleep(spec["step_s"])  # the first batch's own step (before, the second batch was asked for at once)
    t1 = time.perf_counter()
    n = spec["batches"] if not spec["step_s"] else spec["steps"]
    early = None  # the reader's counts when the first EARLY batches were handed over (the first one's included)
    for i in range(n):
        batch = next(it)
        delivered.append(int(np.count_nonzero(batch["segment_ids"])) * 2)
        if i + 2 == EARLY:
            early = read_stats.collect(built.stats_folder)
        if spec["step_s"]:
            time.sleep(spec["step_s"])
    span = time.perf_counter() - t1
    report = it.report()
    it.close()
    stop.set()
    return {
        "first_s": first_s,
        "build_s": build_s,
        "batches": n,
        "batches_per_s": n / span,
        "delivered_first": delivered[0],
        "delivered_rest": int(sum(delivered[1:])),
        "steps_waited": report.steps_waited,
        "wait_p50_ms": report.wait_p50_ms,
        "wait_p99_ms": report.wait_p99_ms,
        "wait_max_ms": report.wait_max_ms,
        "late_reads": report.late_reads,
        "early_batches": EARLY,
        "early_fetched_per_delivered": early.bytes_fetched / max(1, early.bytes_delivered) if early else None,
        "reader_fetched": report.bytes_fetched,
        "reader_delivered": report.bytes_delivered,
        "request_latency_p50_ms": report.request_latency_p50_ms,
        "request_latency_p99_ms": report.request_latency_p99_ms,
        "peak_rss_gb": peak[0] / 1e9,
        "waited": [[i, round(w * 1e3, 1)] for i, w in enumerate(it.waits) if i and w > it.threshold_s],
    }


def run_row(spec: dict, proxy) -> dict:
    """Run ``child(spec)`` in a fresh process, reading the proxy's counts at its first batch and at its end."""
    env = {**os.environ, **S3_ENV, "AWS_ENDPOINT_URL": proxy.url}
    proxy.reset_stats()
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        raise SystemExit(f"row {spec['label']} failed (exit {proc.returncode})")
    at_first = proxy.stats()
    proxy.reset_stats()
    proc.stdin.write("\n")
    proc.stdin.flush()
    out = proc.stdout.read()
    if proc.wait():
        raise SystemExit(f"row {spec['label']} failed (exit {proc.returncode})")
    result = json.loads(out.strip().splitlines()[-1])
    rest = proxy.stats()
    result["first_bytes"] = at_first.bytes_down
    result["first_requests"] = at_first.requests
    result["fetched"] = rest.bytes_down
    result["requests"] = rest.requests
    result["fetched_per_delivered"] = rest.bytes_down / max(1, result["delivered_rest"])
    result["requests_per_batch"] = rest.requests / max(1, result["batches"])
    return result


# --------------------------------------------------------------------------- the floor


def first_batch_bound(requests: int, fetched: int, latency_s: float, server_rps: float, in_flight: int = 64) -> float:
    """Seconds the first batch's reads need at least: the manifest, then the offsets and shard indices, then the
    pieces (3 round trips), plus a round trip per ``in_flight`` more requests, or the requests at the rate the
    server answers plain concurrent GETs in the same run (``server_rps``, the floor), whichever is longer, plus its
    bytes over the connections it can use (50 MB/s each). moto on loopback answers ~200 requests/s on 2 cores at
    any added latency, so from it a first batch of hundreds of requests is bounded by the server, not the wire."""
    trips = 3 + -(-max(0, requests) // in_flight)
    wait = max(trips * latency_s, 3 * latency_s + max(0, requests) / max(server_rps, 1e-9))
    return wait + fetched / (BANDWIDTH * max(1, min(in_flight, requests)))


def floor(url: str, proxy, requests: int = 2000, concurrency: int = 32, seed: int = 0) -> dict:
    """The floor for our token store: ranged GETs of its inner chunks (:func:`plain_gets`)."""
    from datatools.io.formats.store import TokenStore

    store = TokenStore(url)
    shards = store.manifest["chunks"]["tokens"]
    keys = sorted((k for k in shards if k.startswith("c/")), key=lambda k: int(k[2:]))
    prefix = url.split("/", 3)[3].rstrip("/") + "/tokens/"
    per_shard = -(-(1 << 20) // store.read_granularity)
    return plain_gets([prefix + k for k in keys], per_shard, "start", proxy, requests, concurrency, seed)


def floor_levanter(url: str, proxy, requests: int = 400, concurrency: int = 32, seed: int = 0) -> dict:
    """The floor for a Levanter cache: ranged GETs of its data array's inner chunks (index at the shard's end;
    fewer requests than :func:`floor`: an inner chunk is 1 MiB of tokens, ~0.5 MB stored)."""
    import boto3

    prefix = url.split("/", 3)[3].rstrip("/") + "/input_ids/data/c/"
    s3 = boto3.client("s3", endpoint_url=proxy.url, region_name=S3_ENV["AWS_REGION"])
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]
    return plain_gets(keys, LEVANTER_OUTER // LEVANTER_INNER, "end", proxy, requests, concurrency, seed)


def plain_gets(keys, per_shard: int, index_at: str, proxy, requests: int, concurrency: int, seed: int) -> dict:
    """``requests`` ranged GETs of randomly chosen inner chunks of the shards ``keys`` (their byte ranges from
    the shard indices, ``per_shard`` entries at the shard's ``index_at``), by a plain loop of ``concurrency``
    threads with a boto3 client each, through the proxy: requests/s and MB/s."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=proxy.url, region_name=S3_ENV["AWS_REGION"])
    index_bytes = per_shard * 16 + 4
    span_of = f"bytes=0-{index_bytes - 1}" if index_at == "start" else f"bytes=-{index_bytes}"
    ranges = []
    rng = np.random.default_rng(seed)
    for key in rng.choice(keys, size=min(64, len(keys)), replace=False):
        head = s3.get_object(Bucket=BUCKET, Key=key, Range=span_of)["Body"].read()
        table = np.frombuffer(head[: per_shard * 16], "<u8").reshape(-1, 2)
        ranges += [(key, int(o), int(o + m - 1)) for o, m in table if m and o != (1 << 64) - 1]
    picks = [ranges[i] for i in rng.integers(0, len(ranges), requests)]
    local = threading.local()

    def get(r) -> int:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = boto3.client("s3", endpoint_url=proxy.url, region_name=S3_ENV["AWS_REGION"])
        return len(client.get_object(Bucket=BUCKET, Key=r[0], Range=f"bytes={r[1]}-{r[2]}")["Body"].read())

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        got = sum(pool.map(get, picks))
    span = time.perf_counter() - t0
    return {"requests_per_s": requests / span, "mb_per_s": got / span / MB, "mean_bytes": got / requests}


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=500_000_000)
    ap.add_argument("--latencies", type=float, nargs="+", default=[0, 30, 100], help="ms added per request")
    ap.add_argument(
        "--batches", type=int, default=500, help="block shuffle rows: batches timed as fast as they come (~1 epoch)"
    )
    ap.add_argument("--full-batches", type=int, default=40, help="full shuffle rows: batches timed (~4 s each)")
    ap.add_argument("--steps", type=int, default=500, help="simulated steps (hosts 0 of 4 and of 16, block)")
    ap.add_argument("--tail", action="store_true", help="also a row with every 100th request 1 s late (at +100 ms)")
    ap.add_argument("--step-time", type=float, default=0.4)
    ap.add_argument("--only", type=int, nargs="*", default=None, help="rows of each latency to run (0-4)")
    ap.add_argument("--seed", type=int, default=0, help="the pipeline's seed (a repeat: another seed)")
    ap.add_argument(
        "--restore-at",
        type=int,
        default=0,
        metavar="K",
        help="block shuffle rows: start from a checkpoint at global batch K (a restart mid-epoch; 0: a fresh start)",
    )
    ap.add_argument(
        "--io-block",
        type=int,
        nargs=2,
        default=None,
        metavar=("SIZE", "WINDOW_BLOCKS"),
        help="the block shuffle's io_block_size and window_blocks (default 64 1024; a Levanter cache's 262,144-token "
        "chunks read whole: 337 195, one chunk a block, or 674 97, two; the same window of ~65k documents)",
    )
    ap.add_argument(
        "--layout",
        choices=("datatools", "levanter"),
        default="datatools",
        help="what is in the bucket: our token store, or the same documents as a Levanter cache (JSON: "
        "remote_read_levanter)",
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return
    from datatools.testing.slow_proxy import SlowProxy

    announce(1, "each row once, in a fresh process; the proxy counts every request and byte")
    os.environ.update(S3_ENV)
    rows, results = [], []
    ranged = args.layout == "levanter"  # moto reads a whole ~250 MB shard for each ranged GET otherwise
    with tempfile.TemporaryDirectory() as tmp, s3_server(Path(tmp), ranged_reads=ranged) as endpoint:
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name=S3_ENV["AWS_REGION"]).create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": S3_ENV["AWS_REGION"]}
        )
        url = f"s3://{BUCKET}/{'store' if args.layout == 'datatools' else 'levanter'}"
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        made = (build_store if args.layout == "datatools" else build_levanter_cache)(url, args.tokens)
        print(f"store: {made['documents']:,} documents, {made['tokens']:,} tokens, written in {made['write_s']:.0f} s")
        port = int(endpoint.rsplit(":", 1)[1])
        with SlowProxy(port, latency_s=0.0, bandwidth_bps=BANDWIDTH) as proxy:
            os.environ["AWS_ENDPOINT_URL"] = proxy.url
            runs = [(latency, 0) for latency in args.latencies] + ([(100.0, 1)] if args.tail else [])
            for latency, tail in runs:
                proxy.latency_s = latency / 1e3
                proxy.tail_every, proxy.tail_s = (100, 1.0) if tail else (0, 0.0)
                fl = floor(url, proxy) if args.layout == "datatools" else floor_levanter(url, proxy)
                plan = [
                    ("block, streaming (lanes)", 1, 0.0),
                    ("block, streaming (lanes)", 4, 0.0),
                    ("block, streaming (lanes)", 4, args.step_time),
                    ("block, streaming (lanes)", 16, args.step_time),
                    ("full, planned", 1, 0.0),
                ]
                if tail:
                    plan = [("block, streaming (lanes)", 4, args.step_time)]
                for row, (mode, hosts, step_s) in enumerate(plan):
                    if args.only is not None and row not in args.only and not tail:
                        continue
                    cfg = config(url, mode, hosts)
                    cfg["seed"] = args.seed
                    if args.io_block and cfg["shuffle"]["kind"] == "block":
                        cfg["shuffle"] = {**cfg["shuffle"], "io_block_size": args.io_block[0]}
                        cfg["shuffle"]["window_blocks"] = args.io_block[1]
                    blocks = f", blocks {args.io_block[0]} x {args.io_block[1]}" if args.io_block else ""
                    blocks = blocks if mode.startswith("block") else ""
                    restore_at = args.restore_at if mode.startswith("block") else 0
                    restored = f", restored at batch {restore_at}" if restore_at else ""
                    spec = {
                        "label": f"{mode}, {'1 host' if hosts == 1 else f'host 0 of {hosts}'}" + blocks + restored,
                        "restore_at": restore_at,
                        "config": cfg,
                        "batches": args.batches if mode.startswith("block") else args.full_batches,
                        "steps": args.steps,
                        "step_s": step_s,
                    }
                    r = run_row(spec, proxy)
                    r.update(latency_ms=latency, tail=bool(tail), mode=mode, hosts=hosts, step_s=step_s)
                    r["restore_at"] = restore_at
                    r["floor_batches_per_s"] = fl["requests_per_s"] / max(r["requests_per_batch"], 1e-9)
                    r["first_bound_s"] = first_batch_bound(
                        r["first_requests"], r["first_bytes"], latency / 1e3, fl["requests_per_s"]
                    )
                    results.append(r)
                    rows.append(
                        [
                            f"+{latency:.0f} ms" + (", 1% +1 s" if tail else ""),
                            spec["label"] + (f", {args.steps} steps of {step_s} s" if step_s else ""),
                            f"{r['first_s']:.1f} s ({r['first_bytes'] / MB:.0f} MB)",
                            f"{r['first_bound_s']:.1f} s",
                            "-" if step_s else f"{r['batches_per_s']:.2f}",
                            f"{r['steps_waited']} of {r['batches']}" if step_s else "-",
                            f"{r['fetched_per_delivered']:.2f}"
                            + (
                                f" (first 30: {r['early_fetched_per_delivered']:.2f})"
                                if r["early_fetched_per_delivered"]
                                else ""
                            ),
                            f"{r['late_reads']}",
                            f"{r['requests_per_batch']:.0f}",
                            f"{r['peak_rss_gb']:.2f} GB",
                            f"{fl['requests_per_s']:.0f} req/s; {r['floor_batches_per_s']:.1f} batches/s",
                        ]
                    )
                    print(f"  {rows[-1]} build {r['build_s']:.1f} s", flush=True)
                results.append({"latency_ms": latency, "floor": fl})
    print_table(
        f"{'Token store' if args.layout == 'datatools' else 'Levanter cache'} in S3 (moto) behind a proxy at "
        f"50 MB/s per connection: {made['tokens'] / 1e6:,.0f}M tokens, ctx 8192, global batch 128",
        [
            "latency",
            "pipeline",
            "first batch (fetched)",
            "bound",
            "batches/s",
            "steps waited > 10 ms",
            "fetched / delivered",
            "late reads",
            "requests / batch",
            "peak RSS",
            "floor: plain concurrent GETs",
        ],
        rows,
    )
    path = write_json(
        "remote_read" if args.layout == "datatools" else "remote_read_levanter",
        {"store": made, "rows": results, "args": vars(args)},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
