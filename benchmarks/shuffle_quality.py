"""What each shuffle costs the model: a small model trained with `datatools train` on a corpus stored grouped by
source, under five read orders, evaluated on a held-out sample drawn uniformly from every source.

Corpus: benchmarks/corpora.py's three sources (manual pages, standard-library sources, their docstrings), the same
number of documents from each (drawn at random, kept in path order, each cut to --max-chars characters), written
as one JSON Lines file per source and pre-tokenized from that directory: the store holds the sources one after
another, as a store written from a directory of per-source files does. A second store is the same input written
with `pretokenize --shuffle-seed`. Held out: --eval-docs documents of each source (not in either store).

Orders (the pipeline's `shuffle` and streaming `packing.read_order`), each with the same steps, rows and model:
  none            shuffle: none (storage order): the control that must show damage
  full            shuffle: full (a Feistel permutation of every document)
  block-window    shuffle: block, read_order: window (the block shuffle's window order)
  lanes           shuffle: block, read_order: lanes (today's default)
  written+lanes   the write-shuffled store, shuffle: block, read_order: lanes
  full-lanes      (--orders only) a full shuffle read in lanes: shuffle: block with 1-document blocks, one window
The block shuffle's window is --window-share of the corpus (the users': ~65k documents of a few million, a few
percent). Beside each run: `shuffle-report`'s groups per batch for its order (a group = one source's documents),
the mix distance after packing and the bytes the (local) loader fetched per batch. Seeds: the pipeline's and the
model's, --seeds of them.

    python benchmarks/shuffle_quality.py [--seeds 3] [--docs-per-source 360] [--steps 400]

Two passes that train nothing and add a key to the results JSON (the training figures kept):

    python benchmarks/shuffle_quality.py --bytes-only    # bytes_from_bucket: each order's bytes from moto through
                                                         # the slow-store proxy, the study's shape and the users'
    python benchmarks/shuffle_quality.py --proxy-only    # proxy_after_packing: each order's mix distance after
                                                         # packing (shuffle-report --packed-batches) beside its loss
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, announce, print_table, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpora import SOURCES  # noqa: E402

from datatools.analysis.shuffle_quality import shuffle_report  # noqa: E402
from datatools.io.formats.store import TokenStore  # noqa: E402
from datatools.jobs.demo_data import train_tokenizer  # noqa: E402
from datatools.jobs.pretokenize import pretokenize  # noqa: E402

ORDERS = ("none", "full", "block-window", "lanes", "written+lanes")
EXTRA = ("full-lanes",)  # a full shuffle read in lanes: a block shuffle of 1-document blocks over the whole corpus
REPORT_ORDER = {"none": "none", "full": "full", "block-window": "block", "lanes": "lanes", "written+lanes": "lanes"}
REPORT_ORDER["full-lanes"] = "lanes"
WRITE_SEED = 1234


def build_corpus(work: Path, docs_per_source: int, eval_docs: int, max_chars: int) -> dict:
    """Per-source JSONL files (train in ``work/in``, held out in ``work/eval/NAME``); the tokenizer."""
    (work / "in").mkdir(parents=True)
    rng = random.Random(0)
    sample: list[str] = []
    for i, (name, texts_of) in enumerate(SOURCES.items()):
        texts = [t[:max_chars] for t in texts_of() if t.strip()]
        picked = sorted(rng.sample(range(len(texts)), docs_per_source + eval_docs))
        held = set(rng.sample(picked, eval_docs))
        train = [texts[j] for j in picked if j not in held]  # path order: grouped and sorted like the source
        (work / "eval" / name).mkdir(parents=True)
        with open(work / "in" / f"{i:02d}-{name}.jsonl", "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in train)
        with open(work / "eval" / name / "held_out.jsonl", "w") as f:
            f.writelines(json.dumps({"text": texts[j]}) + "\n" for j in sorted(held))
        sample += train[:: max(1, len(train) // 300)]
    return {"tokenizer": train_tokenizer(sample, work / "tokenizer.json", vocab_size=1024)}


def eval_batches(store: Path, ctx: int, rows: int) -> list[dict]:
    """Every held-out document of a store once, packed (best fit decreasing) into batches of ``rows`` x ``ctx``."""
    from datatools.pipeline import build_canonical, parse_config

    cfg = parse_config(
        {
            "source": {"path": str(store)},
            "shuffle": {"kind": "none"},
            "packing": {"mode": "planned", "ctx": ctx},
            "batch_size": rows,
            "num_epochs": 1,
            "drop_remainder": False,
        }
    )
    return [dict(b) for b in build_canonical(cfg).dataset]


def run_config(store: Path, order: str, seed: int, a: argparse.Namespace, io_block: int, window_blocks: int) -> dict:
    shuffle: dict = {"kind": {"none": "none", "full": "full"}.get(order, "block")}
    if shuffle["kind"] == "block":
        shuffle |= {"io_block_size": io_block, "window_blocks": window_blocks}
    return {
        "source": {"path": str(store)},
        "shuffle": shuffle,
        "packing": {
            "mode": "streaming",
            "ctx": a.ctx,
            "window": a.pack_window,
            "read_order": "window" if order in ("none", "full", "block-window") else "lanes",
        },
        "batch_size": a.rows,
        "num_epochs": None,
        "seed": seed,
        "model": {"vocab_size": 1024, "d_model": a.d_model, "n_layers": a.layers, "n_heads": 4},
        "train": {"steps": a.steps, "learning_rate": 3.0e-3, "warmup_steps": 20, "log_every": 10**6, "seed": seed},
    }


def order_blocks(order: str, n: int, io_block_size: int, window_blocks: int) -> tuple[int, int]:
    """(io_block_size, window_blocks) of an order's block shuffle: ``full-lanes`` is 1-document blocks, one window."""
    return (1, n) if order == "full-lanes" else (io_block_size, window_blocks)


def proxy_figures(a: argparse.Namespace, stores: dict, n: int, window_blocks: int, docs_per_batch: int) -> dict:
    """Beside each order, from its schedule alone: ``shuffle-report``'s groups per batch (records in read order) and
    the figures after packing (:func:`datatools.pipeline.packed_mix.packed_mix`: documents and groups per batch, the
    batch's source mix against the corpus's, by total variation and KL), the latter for every seed of the study (the
    pipeline's seed decides the order), over the steps a run trains."""
    from datatools.pipeline import parse_config
    from datatools.pipeline.packed_mix import packed_mix

    proxy = {}
    for order in a.orders:
        io, window = order_blocks(order, n, a.io_block_size, window_blocks)
        written = WRITE_SEED if order == "written+lanes" else None
        rep = shuffle_report(
            n,
            io_block_size=io,
            window_blocks=window,
            group_size=a.docs_per_source,
            batch_size=docs_per_batch,
            lanes=a.rows * 2,  # batch_size x lane_period (2, the default)
            lane_window=a.pack_window,
            write_seed=written,
        )
        s = rep.orders[REPORT_ORDER[order]]
        packed = []
        for seed in range(a.seeds):
            where = stores["written" if order == "written+lanes" else "input"]
            cfg = parse_config(pipeline_config(run_config(where, order, seed, a, io, window)))
            mix = packed_mix(cfg, group_size=a.docs_per_source, batches=a.steps, write_seed=written)
            packed.append(mix[REPORT_ORDER[order]])
        proxy[order] = {
            "groups_per_batch": s.groups_per_batch,
            "of_full": s.groups_per_batch / rep.expected_groups_per_batch,
            "mean_displacement_fraction": s.mean_displacement_fraction,
            "packed_documents_per_batch": float(np.mean([m.documents_per_batch for m in packed])),
            "packed_groups_per_batch": float(np.mean([m.groups_per_batch for m in packed])),
            "mix_distance": float(np.mean([m.mix_distance for m in packed])),
            "mix_kl": float(np.mean([m.mix_kl for m in packed])),
            "mix_distance_per_seed": [m.mix_distance for m in packed],
        }
    return proxy


def spearman(x, y) -> float:
    """Spearman's rank correlation of two equal-length sequences (no ties expected)."""
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    return float(np.corrcoef(rx, ry)[0, 1])


def proxy_only(a: argparse.Namespace) -> dict:
    """The proxies of every order and seed over the study's corpus (rebuilt, not trained on), set beside the losses
    of the study's results JSON: the ranks by loss and by mix distance, and the rank correlation over the runs."""
    path = RESULTS / f"{a.json_name}.json"
    study = json.loads(path.read_text()) if path.exists() else {}
    extra = RESULTS / "shuffle_quality_full_lanes.json"  # the full-lanes reference run (--orders full full-lanes)
    runs = list(study.get("runs", []))
    if extra.exists() and not any(r["order"] == "full-lanes" for r in runs):
        runs += [r for r in json.loads(extra.read_text())["runs"] if r["order"] == "full-lanes"]
    work = Path(tempfile.mkdtemp(prefix="dt-shufq-"))
    try:
        tok = build_corpus(work, a.docs_per_source, a.eval_docs, a.max_chars)["tokenizer"]
        stores = {"input": work / "store", "written": work / "store-shuffled"}
        pretokenize(work / "in", stores["input"], tok, eos=True, progress=False)
        pretokenize(work / "in", stores["written"], tok, eos=True, shuffle_seed=WRITE_SEED, progress=False)
        lengths = TokenStore(stores["input"]).lengths()
        n = lengths.shape[0]
        window_blocks = max(1, round(a.window_share * n / a.io_block_size))
        docs_per_batch = max(1, round(a.rows * a.ctx / float(lengths.mean())))
        proxy = proxy_figures(a, stores, n, window_blocks, docs_per_batch)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    loss = {o: float(np.mean([r["eval_loss"] for r in runs if r["order"] == o])) for o in proxy}
    known = [o for o in proxy if not math.isnan(loss[o])]
    pairs = [
        (r["eval_loss"], proxy[r["order"]]["mix_distance_per_seed"][r["seed"]]) for r in runs if r["order"] in proxy
    ]
    out = {
        "orders": proxy,
        "eval_loss_mean": loss,
        "rank_by_loss": sorted(known, key=lambda o: loss[o]),
        "rank_by_mix_distance": sorted(known, key=lambda o: proxy[o]["mix_distance"]),
        "rank_by_mix_kl": sorted(known, key=lambda o: proxy[o]["mix_kl"]),
        "rank_by_packed_documents_per_batch": sorted(known, key=lambda o: -proxy[o]["packed_documents_per_batch"]),
        "rank_by_groups_per_batch": sorted(known, key=lambda o: -proxy[o]["groups_per_batch"]),
        "spearman_runs_loss_mix_distance": spearman(*zip(*pairs)) if len(pairs) > 2 else math.nan,
        "runs": len(pairs),
    }
    return out


def pipeline_config(cfg: dict) -> dict:
    """A training config's pipeline part (what the bucket reader runs: no model, no training)."""
    return {k: v for k, v in cfg.items() if k not in ("model", "train")}


def users_config(url: str, order: str, a: argparse.Namespace) -> dict:
    """The users' shape (``benchmarks/remote_read.py``'s): ctx 8192, global batch 128, streaming packing over
    windows of 1024 documents, the block shuffle 64 x 1024; ``order`` as in the study (no ``full-lanes``)."""
    shuffle: dict = {"kind": {"none": "none", "full": "full"}.get(order, "block")}
    if shuffle["kind"] == "block":
        shuffle |= {"io_block_size": 64, "window_blocks": 1024}
    return {
        "source": {"path": url},
        "shuffle": shuffle,
        "packing": {
            "mode": "streaming",
            "ctx": 8192,
            "window": 1024,
            "read_order": "lanes" if order in ("lanes", "written+lanes") else "window",
        },
        "batch_size": 128,
        "num_epochs": None,
        "seed": 0,
    }


def bucket_row(spec: dict, proxy) -> dict:
    """``benchmarks/remote_read.py``'s row (a fresh process reading ``spec``'s config from the bucket through the
    proxy), summed over the whole run, first batch included: wire bytes and requests over batches and over the bytes
    of the tokens the batches hold."""
    from remote_read import run_row

    r = run_row(spec, proxy)
    batches = r["batches"] + 1
    fetched = r["first_bytes"] + r["fetched"]
    delivered = r["delivered_first"] + r["delivered_rest"]
    return {
        "batches": batches,
        "bytes_fetched": int(fetched),
        "bytes_delivered": int(delivered),
        "requests": int(r["first_requests"] + r["requests"]),
        "bytes_fetched_per_batch": fetched / batches,
        "requests_per_batch": (r["first_requests"] + r["requests"]) / batches,
        "fetched_per_delivered": fetched / max(1, delivered),
        "fetched_per_delivered_after_first": r["fetched_per_delivered"],
        "late_reads": r["late_reads"],
        "seconds": r["first_s"] + r["batches"] / r["batches_per_s"],
    }


def bucket_bytes(a: argparse.Namespace) -> dict:
    """Bytes fetched per batch from a bucket for each order: the study's corpus and shape (both its stores written by
    ``pretokenize`` into moto's S3 server) and the users' shape (``remote_read.py``'s store of ``--bucket-tokens``
    tokens of lognormal lengths, and the same written in ``pretokenize --shuffle-seed``'s order), each read through
    :class:`~datatools.testing.slow_proxy.SlowProxy` (``--bucket-latency`` ms a request, 50 MB/s a connection),
    which counts the bytes on the wire and the requests."""
    import boto3
    from read import S3_ENV, s3_server
    from remote_read import BANDWIDTH, BUCKET, build_store

    from datatools.testing.slow_proxy import SlowProxy

    os.environ.update(S3_ENV)
    out: dict = {"latency_ms": a.bucket_latency, "bandwidth_bytes_per_s": BANDWIDTH, "study": {}, "users": {}}
    study_shape, users_shape = "study" in a.bucket_shapes, "users" in a.bucket_shapes
    with tempfile.TemporaryDirectory() as tmp, s3_server(Path(tmp)) as endpoint:
        boto3.client("s3", endpoint_url=endpoint, region_name=S3_ENV["AWS_REGION"]).create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": S3_ENV["AWS_REGION"]}
        )
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        study = {"input": f"s3://{BUCKET}/study", "written": f"s3://{BUCKET}/study-shuffled"} if study_shape else {}
        users = {"input": f"s3://{BUCKET}/users", "written": f"s3://{BUCKET}/users-shuffled"} if users_shape else {}
        n = window_blocks = 0
        if study_shape:
            work = Path(tmp) / "corpus"
            tok = build_corpus(work, a.docs_per_source, a.eval_docs, a.max_chars)["tokenizer"]
            pretokenize(work / "in", study["input"], tok, eos=True, progress=False)
            pretokenize(work / "in", study["written"], tok, eos=True, shuffle_seed=WRITE_SEED, progress=False)
            n = len(TokenStore(study["input"]))
            window_blocks = max(1, round(a.window_share * n / a.io_block_size))
        if users_shape:
            out["users_store"] = build_store(users["input"], a.bucket_tokens)
            build_store(users["written"], a.bucket_tokens, write_seed=WRITE_SEED)
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name=S3_ENV["AWS_REGION"])

        def stored(url: str) -> dict:
            """A store's documents, tokens, token bytes and the bytes of its objects in the bucket."""
            store = TokenStore(url)
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=url.split("/", 3)[3] + "/")
            size = sum(o["Size"] for page in pages for o in page.get("Contents", []))
            tokens = int(store.lengths().sum())
            return {"documents": len(store), "tokens": tokens, "token_bytes": tokens * 2, "stored_bytes": size}

        out["stores"] = {
            f"{shape} {k}": stored(u) for shape, urls in (("study", study), ("users", users)) for k, u in urls.items()
        }
        epoch_batches = int(out["users_store"]["tokens"] // (128 * 8192)) if users_shape else 0
        port = int(endpoint.rsplit(":", 1)[1])
        with SlowProxy(port, latency_s=a.bucket_latency / 1e3, bandwidth_bps=BANDWIDTH) as proxy:
            os.environ["AWS_ENDPOINT_URL"] = proxy.url
            for order in a.orders if study_shape else ():
                blocks = (1, n) if order == "full-lanes" else (a.io_block_size, window_blocks)
                where = study["written" if order == "written+lanes" else "input"]
                cfg = pipeline_config(run_config(where, order, 0, a, *blocks))  # type: ignore[arg-type]
                spec = {"label": f"study {order}", "config": cfg, "batches": a.steps - 1, "steps": 0, "step_s": 0.0}
                out["study"][order] = bucket_row(spec, proxy)
                print(f"  study {order:>14}: {out['study'][order]}", flush=True)
            for order in a.bucket_users_orders if users_shape else ():
                where = users["written" if order == "written+lanes" else "input"]
                batches = a.bucket_batches or max(1, epoch_batches - 2)  # default about one epoch: every token once
                if order in ("full", "block-window") and a.bucket_sample_batches:
                    batches = a.bucket_sample_batches  # a store beyond the reader's cache: ~1,300 GETs a batch
                spec = {"label": f"users {order}", "config": users_config(where, order, a), "batches": batches - 1}
                spec |= {"steps": 0, "step_s": 0.0}
                out["users"][order] = bucket_row(spec, proxy)
                print(f"  users {order:>14}: {out['users'][order]}", flush=True)
    return out


def save_key(key: str, result: dict, name: str) -> Path:
    """``result`` as ``key`` of ``benchmarks/results/NAME.json``, the training figures kept; with its own machine
    and load."""
    from _common import LOAD_AT_START, machine

    path = RESULTS / f"{name}.json"
    payload = json.loads(path.read_text()) if path.exists() else {}
    payload[key] = {
        "machine": machine(),
        "load_at_start": LOAD_AT_START,
        "load_at_end": os.getloadavg(),
        **result,
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=float))
    tmp.replace(path)
    return path


def print_bucket_bytes(result: dict) -> None:
    """The bytes table of :func:`bucket_bytes`: one row per shape and order."""
    rows = []
    for shape in ("study", "users"):
        lanes = result[shape].get("lanes")
        for order, r in result[shape].items():
            after = r["fetched_per_delivered_after_first"]
            store = result["stores"][f"{shape} {'written' if order == 'written+lanes' else 'input'}"]
            rows.append(
                [
                    f"{shape}: {order}",
                    f"{store['stored_bytes'] / store['token_bytes']:.3f}",
                    f"{r['batches']:,}",
                    f"{r['bytes_fetched_per_batch'] / 1024:,.1f} KiB",
                    f"{r['requests_per_batch']:.1f}",
                    f"{r['fetched_per_delivered']:.3f}",
                    f"{after:.3f}",
                    f"{r['fetched_per_delivered'] / lanes['fetched_per_delivered']:.3f}" if lanes else "-",
                ]
            )
    print_table(
        f"bytes from a bucket (moto behind the slow-store proxy, +{result['latency_ms']:.0f} ms a request, "
        f"{result['bandwidth_bytes_per_s'] / 1e6:.0f} MB/s a connection); whole runs, first batch included",
        [
            "shape: order",
            "store's bytes / token bytes",
            "batches",
            "fetched / batch",
            "requests / batch",
            "fetched / delivered",
            "after the first batch",
            "x lanes",
        ],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--docs-per-source", type=int, default=360)
    parser.add_argument("--eval-docs", type=int, default=40, help="held-out documents per source")
    parser.add_argument("--max-chars", type=int, default=1500, help="each document cut to this many characters")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--ctx", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--pack-window", type=int, default=16, help="documents per streaming packing window")
    parser.add_argument("--io-block-size", type=int, default=4, help="documents per io block")
    parser.add_argument("--window-share", type=float, default=0.03, help="block shuffle window / corpus documents")
    parser.add_argument("--orders", nargs="+", default=list(ORDERS), choices=ORDERS + EXTRA)
    parser.add_argument("--json-name", default="shuffle_quality", help="benchmarks/results/NAME.json")
    parser.add_argument(
        "--bytes-only",
        action="store_true",
        help="no training: the bytes each order fetches from a bucket through the slow-store proxy, at the study's "
        "shape (--orders, default all six) and the users' (JSON key bytes_from_bucket, the training figures kept)",
    )
    parser.add_argument("--bucket-tokens", type=int, default=100_000_000, help="--bytes-only: the users' store")
    parser.add_argument("--bucket-latency", type=float, default=0.0, help="--bytes-only: ms added per request")
    parser.add_argument("--bucket-shapes", nargs="+", default=["study", "users"], choices=("study", "users"))
    parser.add_argument(
        "--bucket-users-orders", nargs="+", default=list(ORDERS), choices=ORDERS, help="--bytes-only: the users' rows"
    )
    parser.add_argument(
        "--bucket-batches", type=int, default=0, help="--bytes-only: batches of each users' row (default ~1 epoch)"
    )
    parser.add_argument(
        "--bucket-sample-batches",
        type=int,
        default=0,
        help="--bytes-only: batches of the users' full and block-window rows (default as --bucket-batches)",
    )
    parser.add_argument("--bucket-key", default="bytes_from_bucket", help="--bytes-only: the results JSON's key")
    parser.add_argument(
        "--bucket-full-batches",
        type=int,
        default=12,
        help="--bytes-only: batches of full and block-window, users' shape",
    )
    parser.add_argument(
        "--proxy-only",
        action="store_true",
        help="no training: the proxies of every order and seed beside the losses of the results JSON (key "
        "proxy_after_packing, the training figures kept)",
    )
    a = parser.parse_args()
    if a.proxy_only:
        if a.orders == list(ORDERS):
            a.orders = list(ORDERS + EXTRA)
        announce(1, "counts from the schedules alone")
        result = proxy_only(a)
        rows = [
            [
                o,
                f"{result['eval_loss_mean'][o]:.4f}",
                f"{p['groups_per_batch']:.2f}",
                f"{p['packed_documents_per_batch']:.2f}",
                f"{p['packed_groups_per_batch']:.2f}",
                f"{p['mix_distance']:.4f}",
                f"{p['mix_kl']:.4f}",
                " ".join(f"{x:.4f}" for x in p["mix_distance_per_seed"]),
            ]
            for o, p in result["orders"].items()
        ]
        print_table(
            "each order beside its evaluation loss (means over seeds)",
            [
                "order",
                "eval loss",
                "groups/batch (records)",
                "documents/batch",
                "groups/batch",
                "mix TV",
                "mix KL",
                "mix TV per seed",
            ],
            rows,
        )
        for key in (
            "rank_by_loss",
            "rank_by_mix_distance",
            "rank_by_mix_kl",
            "rank_by_packed_documents_per_batch",
            "rank_by_groups_per_batch",
        ):
            print(f"  {key}: {', '.join(result[key])}")
        print(f"  Spearman over {result['runs']} runs (loss, mix TV): {result['spearman_runs_loss_mix_distance']:.3f}")
        print(f"wrote {save_key('proxy_after_packing', result, a.json_name)}")
        return
    if a.bytes_only:
        if a.orders == list(ORDERS):
            a.orders = list(ORDERS + EXTRA)
        announce(1, "each row once, in a fresh process; the proxy counts every request and byte")
        result = bucket_bytes(a)
        print_bucket_bytes(result)
        print(f"wrote {save_key(a.bucket_key, result, a.json_name)}")
        return
    announce(a.seeds, "one process; each run trains the same steps on the same number of rows")
    from datatools.train.loop import load_train_config, train

    work = Path(tempfile.mkdtemp(prefix="dt-shufq-"))
    t_start = time.perf_counter()
    try:
        tok = build_corpus(work, a.docs_per_source, a.eval_docs, a.max_chars)["tokenizer"]
        stores = {"input": work / "store", "written": work / "store-shuffled"}
        pretokenize(work / "in", stores["input"], tok, eos=True, progress=False)
        pretokenize(work / "in", stores["written"], tok, eos=True, shuffle_seed=WRITE_SEED, progress=False)
        store = TokenStore(stores["input"])
        n, lengths = len(store), store.lengths()
        names = list(SOURCES)
        evaluation: dict[str, list[dict]] = {}
        for name in names:
            pretokenize(work / "eval" / name, work / f"eval-{name}", tok, eos=True, progress=False)
            evaluation[name] = eval_batches(work / f"eval-{name}", a.ctx, a.rows)
        evaluation = {"all": [b for name in names for b in evaluation[name]], **evaluation}
        window_blocks = max(1, round(a.window_share * n / a.io_block_size))
        docs_per_batch = max(1, round(a.rows * a.ctx / float(lengths.mean())))
        corpus = {
            "documents": n,
            "tokens": int(lengths.sum()),
            "sources": names,
            "documents_per_source": a.docs_per_source,
            "held_out_per_source": a.eval_docs,
            "io_block_size": a.io_block_size,
            "window_blocks": window_blocks,
            "window_share": window_blocks * a.io_block_size / n,
            "trained_tokens": a.steps * a.rows * a.ctx,
            "epochs": a.steps * a.rows * a.ctx / int(lengths.sum()),
        }
        print(
            f"corpus: {n:,} documents ({a.docs_per_source:,} per source: {', '.join(names)}), "
            f"{int(lengths.sum()):,} tokens; window {window_blocks} blocks of {a.io_block_size} "
            f"({corpus['window_share']:.1%} of the documents); {a.steps} steps of {a.rows}x{a.ctx} "
            f"({corpus['epochs']:.2f} epochs)"
        )

        def blocks(order: str) -> tuple[int, int]:
            return order_blocks(order, n, a.io_block_size, window_blocks)

        proxy = proxy_figures(a, stores, n, window_blocks, docs_per_batch)
        runs = []
        for seed in range(a.seeds):
            for order in a.orders:
                store_path = stores["written" if order == "written+lanes" else "input"]
                cfg_file = work / f"train-{order}-{seed}.yaml"
                cfg_file.write_text(json.dumps(run_config(store_path, order, seed, a, *blocks(order))))
                t0 = time.perf_counter()
                result = train(load_train_config(cfg_file), evaluation=evaluation)
                s = result.summary
                runs.append(
                    {
                        "order": order,
                        "seed": seed,
                        "eval_loss": result.evaluation["all"],
                        "per_source": {k: result.evaluation[k] for k in names},
                        "train_loss_last10": float(np.mean([r.loss for r in result.records[-10:]])),
                        "steps": s.steps,
                        "useful_tokens": s.total_useful_tokens,
                        "bytes_fetched_per_batch": s.loader.bytes_fetched / max(s.steps, 1),
                        "fetched_per_delivered": s.loader.fetched_per_delivered,
                        "seconds": time.perf_counter() - t0,
                    }
                )
                print(
                    f"  seed {seed} {order:>14}: eval loss {result.evaluation['all']:.4f} "
                    + " ".join(f"{k} {result.evaluation[k]:.3f}" for k in names)
                    + f"  ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
        rows, summary = [], {}
        full = [r for r in runs if r["order"] == "full"]
        full_mean = float(np.mean([r["eval_loss"] for r in full])) if full else math.nan
        full_src = {k: float(np.mean([r["per_source"][k] for r in full])) for k in names} if full else {}
        for order in a.orders:
            mine = [r for r in runs if r["order"] == order]
            losses = np.array([r["eval_loss"] for r in mine])
            src = {k: float(np.mean([r["per_source"][k] for r in mine])) for k in names}
            worst = max(names, key=lambda k: src[k] / full_src.get(k, math.nan) if full_src else 0.0)
            summary[order] = {
                "eval_loss_mean": float(losses.mean()),
                "eval_loss_spread": float(losses.max() - losses.min()),
                "eval_loss_std": float(losses.std(ddof=1)) if len(losses) > 1 else 0.0,
                "gap_to_full": float(losses.mean() / full_mean - 1),
                "per_source": src,
                "worst_source": worst,
                "worst_source_gap": float(src[worst] / full_src[worst] - 1) if full_src else math.nan,
                "bytes_fetched_per_batch": float(np.mean([r["bytes_fetched_per_batch"] for r in mine])),
                "fetched_per_delivered": float(np.mean([r["fetched_per_delivered"] for r in mine])),
                **{f"proxy_{k}": v for k, v in proxy[order].items()},
            }
            s = summary[order]
            rows.append(
                [
                    order,
                    f"{s['eval_loss_mean']:.4f} ± {s['eval_loss_spread'] / 2:.4f}",
                    f"{s['gap_to_full']:+.2%}",
                    f"{s['worst_source']} {s['worst_source_gap']:+.2%}",
                    f"{s['bytes_fetched_per_batch'] / 1024:,.1f} KiB ({s['fetched_per_delivered']:.2f}x)",
                    f"{s['proxy_groups_per_batch']:.2f} ({s['proxy_of_full']:.0%})",
                    f"{s['proxy_mix_distance']:.4f}",
                ]
            )
        print_table(
            f"{a.seeds} seeds; {corpus['trained_tokens']:,} token slots per run; eval: {a.eval_docs} held-out "
            f"documents per source",
            [
                "order",
                "eval loss (mean ± half range)",
                "gap to full",
                "worst source gap",
                "fetched/batch (fetched/delivered)",
                "shuffle-report groups/batch (of full)",
                "mix distance after packing",
            ],
            rows,
        )
        control = summary.get("none")
        seed_spread = max((s["eval_loss_spread"] for k, s in summary.items() if k != "none"), default=math.nan)
        power = bool(control and full and control["eval_loss_mean"] - full_mean > seed_spread)
        loss_rank = sorted(summary, key=lambda k: summary[k]["eval_loss_mean"])
        proxy_rank = sorted(summary, key=lambda k: -summary[k]["proxy_groups_per_batch"])
        mix_rank = sorted(summary, key=lambda k: summary[k]["proxy_mix_distance"])
        print(f"  no-shuffle gap beyond the largest seed spread of the others ({seed_spread:.4f}): {power}")
        print(f"  ranked by eval loss: {', '.join(loss_rank)}; by shuffle-report groups/batch: {', '.join(proxy_rank)}")
        print(f"  ranked by mix distance after packing: {', '.join(mix_rank)}")
        payload = {
            "corpus": corpus,
            "model": {"vocab_size": 1024, "d_model": a.d_model, "n_layers": a.layers, "n_heads": 4},
            "args": vars(a),
            "runs": runs,
            "summary": summary,
            "control_has_power": power,
            "rank_by_loss": loss_rank,
            "rank_by_proxy": proxy_rank,
            "rank_by_mix_distance": mix_rank,
            "wall_s": time.perf_counter() - t_start,
        }
        print(f"wrote {write_json(a.json_name, payload)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
