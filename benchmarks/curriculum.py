"""A length curriculum (dataset decomposition, grow_p2) against fixed-ctx packing: attention FLOPs and training.

**Counted** (no timing): one epoch of documents with lengths drawn from (1) a lognormal, median 400, mean ~800
(_common's distribution b) and (2) a heavy-tailed Pareto (alpha 1.1 from 200 tokens, mean ~820), both at most
8,192 tokens; the curriculum's lengths 1024, 2048, 4096, 8192 with 65,536 tokens a batch, against the same tokens
packed into rows of 8,192 (best fit decreasing). Attention FLOPs are counted exactly from the rows
(:mod:`datatools.analysis.curriculum`): fixed ctx over every causal tile (splash, cuDNN, flash by default), fixed
ctx over its in-document tiles only (block-sparse), and the curriculum's batches over every causal tile of every
row. Target: the curriculum needs at least 2x fewer than fixed ctx over every causal tile.

**Trained** (CPU, small model): the demo corpus (the standard library's top-level blocks, tokenized with a BPE of
4,096 ids trained on them here, offline: what ``make demo`` builds), a seeded subset of the documents for training
and held-out documents for validation. The same training tokens, one epoch each way, the same model, optimizer
and tokens per step:

* (a) fixed ctx: planned best-fit-decreasing packing into rows of ``--ctx`` tokens, ``tokens_per_batch / ctx`` rows;
* (b) curriculum: lengths ctx/8, ctx/4, ctx/2, ctx, ``tokens_per_batch`` slots a batch, ``grow_p2``.

Per run: wall time of the epoch (compilation included: one program for (a), four for (b)), the same without the
steps that compiled, attention FLOPs (in-document pairs, and what the dense kernel executed), and the final
validation loss at the longest length (rows of ``--ctx`` tokens of one held-out document each). Three seeds (data
order and initialization); medians.

    python benchmarks/curriculum.py [--train-tokens 300000] [--ctx 512] [--seeds 0 1 2] [--documents 200000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _common import announce, lognormal_lengths, print_table, write_json

from datatools.analysis.curriculum import FLOPS_PER_PAIR, curriculum_savings  # noqa: E402
from datatools.io.sources.documents import ArrayDocuments  # noqa: E402
from datatools.pipeline import build_canonical, parse_config  # noqa: E402
from datatools.train.mfu import attention_pairs_computed, segment_lengths_sq  # noqa: E402
from datatools.train.model import ModelConfig, loss_fn  # noqa: E402
from datatools.train.step import OptimizerConfig, Trainer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".bench_data" / "curriculum"
SIZES = [1024, 2048, 4096, 8192]
TOKENS_PER_BATCH = 65536
VOCAB = 4096


# --------------------------------------------------------------------------- counted


def distributions(n: int, seed: int) -> dict[str, tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    heavy = np.clip(np.round(200 * (rng.pareto(1.1, n) + 1)), 1, 8192).astype(np.int64)
    return {
        "lognormal": (
            "lognormal median 400, mean ~800, <= 8,192",
            lognormal_lengths(n, median=400, mean=800, low=1, high=8192, seed=seed),
        ),
        "heavy-tailed": ("Pareto alpha 1.1 from 200 tokens, <= 8,192", heavy),
    }


def counted(n: int, seed: int) -> list[dict]:
    out = []
    for name, (label, lengths) in distributions(n, seed).items():
        s = curriculum_savings(lengths, SIZES, TOKENS_PER_BATCH, block=128, schedules=("grow_p2", "mix"), seed=seed)
        out.append(
            {
                "distribution": name,
                "label": label,
                "documents": int(lengths.shape[0]),
                "mean_length": float(lengths.mean()),
                "tokens": s.tokens,
                "batches_per_length": dict(zip(map(str, SIZES), s.batches)),
                "pack_length": s.pack_length,
                "attention_flops_per_layer_dmodel": {
                    "fixed_every_causal_tile": FLOPS_PER_PAIR * s.fixed_causal_pairs,
                    "fixed_in_document_tiles": FLOPS_PER_PAIR * s.fixed_document_tile_pairs,
                    "fixed_in_document_pairs": FLOPS_PER_PAIR * s.fixed_pairs,
                    "curriculum_every_causal_tile": FLOPS_PER_PAIR * s.curriculum_causal_pairs,
                    "curriculum_in_document_pairs": FLOPS_PER_PAIR * s.curriculum_pairs,
                },
                "vs_causal": s.vs_causal,
                "vs_block_sparse": s.vs_block_sparse,
                "curriculum_padding": s.curriculum_padding,
                "fixed_padding": s.fixed_padding,
                "grow_p2_work_done": s.schedules[0].done_at,
                "mix_work_done": s.schedules[1].done_at,
            }
        )
    return out


# --------------------------------------------------------------------------- trained


def demo_corpus() -> tuple[np.ndarray, np.ndarray]:
    """(tokens int32, lengths int64) of the demo corpus: the standard library's top-level blocks, each followed by
    ``</s>``, tokenized with a byte-level BPE of 4,096 ids trained on them (cached under .bench_data/curriculum)."""
    from datatools.jobs.demo_data import stdlib_documents, train_tokenizer

    cached = CACHE / "demo.npz"
    if cached.exists():
        z = np.load(cached)
        return z["tokens"], z["lengths"]
    texts = stdlib_documents()
    tokenizer = CACHE / "tokenizer.json"
    if not tokenizer.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        train_tokenizer(texts, tokenizer, vocab_size=VOCAB)
    from tokenizers import Tokenizer

    ids = [e.ids + [1] for e in Tokenizer.from_file(str(tokenizer)).encode_batch(texts)]
    lengths = np.asarray([len(x) for x in ids], np.int64)
    tokens = np.concatenate([np.asarray(x, np.int32) for x in ids])
    np.savez(cached, tokens=tokens, lengths=lengths)
    return tokens, lengths


def split(tokens, lengths, train_tokens: int, ctx: int, val_rows: int, seed: int = 1234):
    """(training documents, validation batch): a seeded order of the documents; validation takes the first
    ``val_rows`` windows of ``ctx`` tokens from documents of at least ``ctx`` tokens in that order (one document
    per row), training the other documents of the order until ``train_tokens``."""
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    order = np.random.default_rng(seed).permutation(lengths.shape[0])
    val, used = [], set()
    for d in order:
        if lengths[d] >= ctx and len(val) < val_rows:
            val.append(tokens[offsets[d] : offsets[d] + ctx])
            used.add(int(d))
    rest = np.asarray([d for d in order if int(d) not in used], np.int64)
    rest = rest[: int(np.searchsorted(np.cumsum(lengths[rest]), train_tokens)) + 1]
    pieces = [tokens[offsets[d] : offsets[d + 1]] for d in rest]
    train = ArrayDocuments(np.concatenate(pieces), np.concatenate(([0], np.cumsum(lengths[rest]))))
    rows = len(val)
    batch = {
        "tokens": np.stack(val).astype(np.int32),
        "segment_ids": np.ones((rows, ctx), np.int32),
        "positions": np.tile(np.arange(ctx, dtype=np.int32), (rows, 1)),
        "loss_mask": np.ones((rows, ctx), np.int32),
    }
    batch["loss_mask"][:, -1] = 0
    return train, batch


def run(kind: str, docs, val: dict, args, seed: int) -> dict:
    ctx = args.ctx
    if kind == "fixed":
        section = {"packing": {"ctx": ctx}, "batch_size": args.tokens_per_batch // ctx}
    else:
        lengths = [ctx // 8, ctx // 4, ctx // 2, ctx]
        section = {
            "curriculum": {
                "lengths": lengths,
                "tokens_per_batch": args.tokens_per_batch,
                "schedule": "grow_p2",
                "tile": ctx // 8,
            }
        }
    cfg = parse_config(
        {"source": {"path": "demo"}, "shuffle": {"kind": "full"}, "seed": seed, "drop_remainder": False, **section}
    )
    built = build_canonical(cfg, docs)
    steps = len(built.batches)
    model = ModelConfig(vocab_size=VOCAB, d_model=args.d_model, n_layers=args.layers, n_heads=4, attention="dense")
    trainer = Trainer(model, OptimizerConfig(args.learning_rate, max(steps // 10, 1), 0.01, 1.0), steps)
    state = trainer.init_state(seed)
    seen: set[tuple[int, int]] = set()
    compiling_s = in_doc = executed = 0.0
    t0 = time.perf_counter()
    for batch in built.dataset:
        t = time.perf_counter()
        state, metrics = trainer.train_step(state, trainer.put_batch(batch))
        float(metrics["loss"])
        shape = tuple(batch["tokens"].shape)
        if shape not in seen:  # the step that compiled this shape's program
            seen.add(shape)
            compiling_s += time.perf_counter() - t
        in_doc += FLOPS_PER_PAIR / 2 * model.n_layers * model.d_model * segment_lengths_sq(batch["segment_ids"])
        executed += FLOPS_PER_PAIR * model.n_layers * model.d_model * attention_pairs_computed("dense", batch, 0)
    wall = time.perf_counter() - t0
    evaluate = jax.jit(lambda p, b: loss_fn(p, model, b)[0])
    val_loss = float(evaluate(state["params"], {k: jnp.asarray(v) for k, v in val.items()}))
    return {
        "kind": kind,
        "seed": seed,
        "steps": steps,
        "compilations": trainer.compilations(),
        "wall_s": wall,
        "wall_without_compiling_steps_s": wall - compiling_s,
        "attention_flops_in_document": in_doc,
        "attention_flops_executed": executed,
        "validation_loss": val_loss,
        "shapes": sorted(seen),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--documents", type=int, default=200_000, help="documents per counted distribution")
    ap.add_argument("--train-tokens", type=int, default=300_000)
    ap.add_argument("--ctx", type=int, default=512, help="the longest length (tokens) of the training comparison")
    ap.add_argument("--tokens-per-batch", type=int, default=4096)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--learning-rate", type=float, default=3e-3)
    ap.add_argument("--val-rows", type=int, default=64)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--skip-training", action="store_true")
    args = ap.parse_args()
    announce(len(args.seeds), "training on CPU; counted figures are exact, not timed")

    rows = counted(args.documents, seed=0)
    print_table(
        f"attention FLOPs of one epoch (per layer and d_model unit), curriculum {SIZES} with "
        f"{TOKENS_PER_BATCH:,} tokens a batch (grow_p2) against fixed ctx 8,192 packing of the same tokens",
        [
            "lengths",
            "docs",
            "tokens",
            "fixed, every causal tile",
            "fixed, in-document tiles",
            "curriculum",
            "vs every causal tile",
            "vs in-document tiles",
            "padding (curriculum / fixed)",
        ],
        [
            [
                r["label"],
                f"{r['documents']:,}",
                f"{r['tokens']:,}",
                f"{r['attention_flops_per_layer_dmodel']['fixed_every_causal_tile']:.3g}",
                f"{r['attention_flops_per_layer_dmodel']['fixed_in_document_tiles']:.3g}",
                f"{r['attention_flops_per_layer_dmodel']['curriculum_every_causal_tile']:.3g}",
                f"{r['vs_causal']:.2f}x fewer",
                f"{r['vs_block_sparse']:.2f}x",
                f"{r['curriculum_padding']:.2%} / {r['fixed_padding']:.2%}",
            ]
            for r in rows
        ],
    )
    payload: dict = {"counted": rows, "sizes": SIZES, "tokens_per_batch": TOKENS_PER_BATCH}
    if not args.skip_training:
        tokens, lengths = demo_corpus()
        docs, val = split(tokens, lengths, args.train_tokens, args.ctx, args.val_rows)
        runs = [run(kind, docs, val, args, seed) for seed in args.seeds for kind in ("fixed", "curriculum")]
        table = []
        for kind, label in (
            ("fixed", f"(a) fixed ctx {args.ctx}"),
            ("curriculum", f"(b) curriculum {[args.ctx // 8, args.ctx // 4, args.ctx // 2, args.ctx]} grow_p2"),
        ):
            mine = [r for r in runs if r["kind"] == kind]

            def med(key, mine=mine):
                return float(np.median([r[key] for r in mine]))

            table.append(
                [
                    label,
                    str(mine[0]["steps"]),
                    str(mine[0]["compilations"]),
                    f"{med('wall_s'):.1f}",
                    f"{med('wall_without_compiling_steps_s'):.1f}",
                    f"{med('attention_flops_in_document'):.3g}",
                    f"{med('attention_flops_executed'):.3g}",
                    f"{med('validation_loss'):.4f}",
                    " ".join(f"{r['validation_loss']:.3f}" for r in mine),
                ]
            )
        print_table(
            f"training on the demo corpus ({int(docs.lengths().sum()):,} tokens, {len(docs):,} documents, one "
            f"epoch; d_model {args.d_model}, {args.layers} layers, dense attention, CPU); medians of "
            f"{len(args.seeds)} seeds; validation: {val['tokens'].shape[0]} held-out rows of {args.ctx} tokens",
            [
                "run",
                "steps",
                "programs",
                "wall s",
                "wall s w/o compiling steps",
                "attention FLOPs (in-document)",
                "attention FLOPs (executed)",
                "val loss @ longest",
                "per seed",
            ],
            table,
        )
        payload["training"] = {
            "corpus": {"documents": len(docs), "tokens": int(docs.lengths().sum()), "val_rows": args.val_rows},
            "args": vars(args),
            "runs": runs,
        }
    path = write_json("curriculum", payload)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
