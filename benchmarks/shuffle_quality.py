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
percent). Beside each run: `shuffle-report`'s groups per batch for its order (a group = one source's documents)
and the bytes the loader fetched per batch. Seeds: the pipeline's and the model's, --seeds of them.

    python benchmarks/shuffle_quality.py [--seeds 3] [--docs-per-source 360] [--steps 400]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import announce, print_table, write_json

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
    a = parser.parse_args()
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
            """(io_block_size, window_blocks) of an order's block shuffle."""
            return (1, n) if order == "full-lanes" else (a.io_block_size, window_blocks)

        proxy = {}
        for order in a.orders:
            rep = shuffle_report(
                n,
                io_block_size=blocks(order)[0],
                window_blocks=blocks(order)[1],
                group_size=a.docs_per_source,
                batch_size=docs_per_batch,
                lanes=a.rows * 2,  # batch_size x lane_period (2, the default)
                lane_window=a.pack_window,
                write_seed=WRITE_SEED if order == "written+lanes" else None,
            )
            s = rep.orders[REPORT_ORDER[order]]
            proxy[order] = {
                "groups_per_batch": s.groups_per_batch,
                "of_full": s.groups_per_batch / rep.expected_groups_per_batch,
                "mean_displacement_fraction": s.mean_displacement_fraction,
            }
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
            ],
            rows,
        )
        control = summary.get("none")
        seed_spread = max((s["eval_loss_spread"] for k, s in summary.items() if k != "none"), default=math.nan)
        power = bool(control and full and control["eval_loss_mean"] - full_mean > seed_spread)
        loss_rank = sorted(summary, key=lambda k: summary[k]["eval_loss_mean"])
        proxy_rank = sorted(summary, key=lambda k: -summary[k]["proxy_groups_per_batch"])
        print(f"  no-shuffle gap beyond the largest seed spread of the others ({seed_spread:.4f}): {power}")
        print(f"  ranked by eval loss: {', '.join(loss_rank)}; by shuffle-report groups/batch: {', '.join(proxy_rank)}")
        payload = {
            "corpus": corpus,
            "model": {"vocab_size": 1024, "d_model": a.d_model, "n_layers": a.layers, "n_heads": 4},
            "args": vars(a),
            "runs": runs,
            "summary": summary,
            "control_has_power": power,
            "rank_by_loss": loss_rank,
            "rank_by_proxy": proxy_rank,
            "wall_s": time.perf_counter() - t_start,
        }
        print(f"wrote {write_json(a.json_name, payload)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
