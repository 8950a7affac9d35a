"""The bad inputs the fuzz suite drives through every CLI subcommand and public function (shared with
scripts/fuzz_report.py, which tabulates the outcomes)."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np

EXTREME_INTS = [0, -1, 2**31, 2**40, 2**63, 2**64]
EXTREME_FLOATS = [math.nan, math.inf, -math.inf, 1e308]
WRONG_TYPES = ["x", "", "x" * 100_000, None, [1, 2], {"a": 1}, True, 3.5]
BAD_VALUES = EXTREME_INTS + EXTREME_FLOATS + WRONG_TYPES
CLI_VALUES = [str(v) for v in EXTREME_INTS] + ["nan", "inf", "", "x", "x" * 100_000, "1.5"]

YAML_BOMB = "\n".join([f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]" if p else f"{c}: &{c} [{','.join(['lol'] * 9)}]"
                       for p, c in zip([None, *"abcdefghi"], "abcdefghij")])
BAD_CONFIGS = [
    YAML_BOMB,
    "source: {path: STORE}\npacking: {ctx: 1099511627776}\n",
    "source: {path: STORE}\npacking: {ctx: 512}\nbatch_size: 18446744073709551616\n",
    "source: {path: STORE}\npacking: {ctx: 512}\nseed: -1\n",
    "source: {path: STORE}\nbucketing: {boundaries: [1099511627776]}\n",
    "source: {path: STORE}\npacking: {ctx: .nan}\n",
    "source: {path: STORE}\npacking: {ctx: 512, window: 4611686018427387904}\n",
    "source: {path: STORE}\nshuffle: {kind: block, io_block_size: 9223372036854775808}\npacking: {ctx: 512}\n",
    "source: {path: STORE}\npacking: [1, 2]\n",
    "- just\n- a list\n",
    "source: {path: STORE\n",
    "a: " + "[" * 200 + "]" * 200 + "\n",
    "source: {path: STORE}\npacking: {ctx: 512}\n" + "x" * (2 << 20),
    "",
    "\x00\x01\x02",
]
BAD_TRAIN_CONFIGS = [
    "source: {path: STORE}\npacking: {ctx: 128}\nbatch_size: 2\nmodel: {vocab_size: 1099511627776}\n",
    "source: {path: STORE}\npacking: {ctx: 128}\nbatch_size: 2\ntrain: {learning_rate: .nan}\n",
    "source: {path: STORE}\npacking: {ctx: 128}\nbatch_size: 2\ntrain: {learning_rate: .inf}\n",
    "source: {path: STORE}\npacking: {ctx: 128}\nbatch_size: 2\nmodel: {d_model: 18446744073709551616}\n",
]

ALLOWED = (ValueError, TypeError, IndexError)  # what a public function may raise on bad input


def make_world(tmp):
    """What the cases point at, under ``tmp`` (a Path): a store, a flat .bin, text inputs, a tokenizer, a good
    config. Returns the store's path."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import random_docs, stdlib_texts, write_test_store

    from datatools.jobs.demo_data import train_tokenizer

    docs = random_docs(300, seed=5, max_len=700)
    store = write_test_store(tmp / "store", docs)
    np.concatenate([np.append(d, 1) for d in docs]).astype(np.uint16).tofile(tmp / "flat.bin")
    texts = stdlib_texts(6)
    (tmp / "text").mkdir()
    (tmp / "text" / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    pq.write_table(pa.table({"text": texts}), tmp / "text.parquet")
    train_tokenizer(texts, tmp / "tok.json", vocab_size=300)
    (tmp / "good.yaml").write_text(f"source: {{path: {store}}}\npacking: {{ctx: 512}}\nbatch_size: 2\n")
    return store


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """``datatools ARGS`` in this process: (status, stdout, stderr)."""
    from datatools.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    return status, out.getvalue(), err.getvalue()


def cli_cases(store: str, tmp: str) -> list[list[str]]:
    """Every integer option of every subcommand with every extreme value, and bad paths and strings."""
    cases = []
    for v in CLI_VALUES:
        for opt in ("--ctx", "--tile", "--buckets", "--max-segments", "--window"):
            cases.append(["analyze-padding", store, opt, v, "--ctx", "256"] if opt != "--ctx" else
                         ["analyze-padding", store, "--ctx", v])
        cases.append(["analyze-padding", f"{tmp}/flat.bin", "--eos-id", v])
        base = {"--n": "1000", "--io-block-size": "8", "--window-blocks": "4", "--group-size": "8", "--batch-size": "16"}
        for opt in (*base, "--seed", "--epoch"):
            args = dict(base, **{opt: v})
            cases.append(["shuffle-report", *[x for kv in args.items() for x in kv]])
        for opt in ("--ctx", "--tile", "--workers"):
            cases.append(["pretokenize", f"{tmp}/text", f"{tmp}/out-{len(cases)}", "--tokenizer", f"{tmp}/tok.json",
                          opt, v] + (["--ctx", "256"] if opt == "--tile" else []))
        for key in ("max_target_length", "per_device_batch_size", "max_segments_per_seq", "devices_per_host"):
            cases.append(["analyze-padding", store, "--maxtext-set", f"{key}={v}"])
        cases.append(["pipeline", f"{tmp}/good.yaml", "--steps", v])
        cases.append(["pipeline", f"{tmp}/good.yaml", "--steps", "1", "--workers", v])
    for s in ("", "x" * 100_000, "\x00", "../../../../nonexistent", "nope.parquet"):
        cases.append(["analyze-padding", s])
        cases.append(["analyze-padding", store, "--column", s])
        cases.append(["analyze-padding", f"{tmp}/text.parquet", "--tokenizer", s])
        cases.append(["analyze-padding", f"{tmp}/text.parquet", "--tokenizer", f"{tmp}/tok.json", "--bos", s])
        cases.append(["pretokenize", s, f"{tmp}/out-s", "--tokenizer", f"{tmp}/tok.json"])
        cases.append(["pipeline", s, "--steps", "1"])
        cases.append(["analyze-padding", store, "--maxtext-config", s])
        cases.append(["analyze-padding", store, "--maxtext-set", s])
        cases.append(["analyze-padding", store, "--maxtext-set", f"grain_packing_type={s}"])
    cases.append(["analyze-padding", store, "--json", "/proc/no/such/dir/r.json"])
    return cases


def function_cases():
    """(name, thunk) pairs: every public function with each bad value in each argument."""
    from datatools import (BlockShuffle, FeistelPermutation, bucket_batch_sizes, bucket_batches, bucket_boundaries,
                           choose_context, chunk, materialize, pack_lengths, tile_align)
    from datatools.io import ArrayDocuments, open_input
    from datatools.pipeline import parse_config
    from datatools.analysis.maxtext import MaxTextSettings, maxtext_view, read_maxtext_config
    from datatools.integrations.maxtext import pipeline_config
    from datatools.kernels.batch_layouts import to_format

    lengths = np.array([5, 300, 17, 64, 1000])
    plan = pack_lengths(lengths, 512)
    tokens = np.arange(int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    docs = ArrayDocuments(tokens, offsets)
    batch = materialize(plan, tokens, offsets)
    cases = []
    for v in BAD_VALUES:
        cases += [
            ("pack_lengths ctx", lambda v=v: pack_lengths(lengths, v)),
            ("pack_lengths max_segments", lambda v=v: pack_lengths(lengths, 512, max_segments=v)),
            ("pack_lengths align", lambda v=v: pack_lengths(lengths, 512, align=v)),
            ("pack_lengths lengths", lambda v=v: pack_lengths([v], 512)),
            ("pack_lengths algorithm", lambda v=v: pack_lengths(lengths, 512, algorithm=v)),
            ("bucket_boundaries num_buckets", lambda v=v: bucket_boundaries(lengths, v)),
            ("bucket_boundaries tile", lambda v=v: bucket_boundaries(lengths, 2, tile=v)),
            ("bucket_boundaries max_len", lambda v=v: bucket_boundaries(lengths, 2, max_len=v)),
            ("bucket_batch_sizes batch_size", lambda v=v: bucket_batch_sizes([128, 1024], batch_size=v)),
            ("bucket_batch_sizes token_budget", lambda v=v: bucket_batch_sizes([128, 1024], token_budget=v)),
            ("bucket_batches boundaries", lambda v=v: bucket_batches(lengths, [v], 4)),
            ("bucket_batches batch_sizes", lambda v=v: bucket_batches(lengths, [1024], v)),
            ("FeistelPermutation n", lambda v=v: FeistelPermutation(v, seed=0)(0)),
            ("FeistelPermutation seed", lambda v=v: FeistelPermutation(100, seed=v)(0)),
            ("FeistelPermutation index", lambda v=v: FeistelPermutation(100, seed=0)(v)),
            ("BlockShuffle n", lambda v=v: BlockShuffle(v, io_block_size=8, window_blocks=4, seed=0).index(0)),
            ("BlockShuffle io_block_size", lambda v=v: BlockShuffle(100, io_block_size=v, window_blocks=4, seed=0).index(0)),
            ("BlockShuffle window_blocks", lambda v=v: BlockShuffle(100, io_block_size=8, window_blocks=v, seed=0).index(0)),
            ("BlockShuffle index", lambda v=v: BlockShuffle(100, io_block_size=8, window_blocks=4, seed=0).index(v)),
            ("tile_align n", lambda v=v: tile_align(v, 128)),
            ("tile_align tile", lambda v=v: tile_align(100, v)),
            ("choose_context max_ctx", lambda v=v: choose_context(lengths, tile=128, max_ctx=v)),
            ("chunk ctx", lambda v=v: chunk(tokens[:100], v, tile=1)),
            ("chunk tile", lambda v=v: chunk(tokens[:100], 64, tile=v)),
            ("materialize rows", lambda v=v: materialize(plan, tokens, offsets, rows=[v])),
            ("materialize pad_id", lambda v=v: materialize(plan, tokens, offsets, pad_id=v)),
            ("ArrayDocuments read_pieces doc", lambda v=v: docs.read_pieces([v], [0], [1])),
            ("ArrayDocuments read_pieces start", lambda v=v: docs.read_pieces([1], [v], [1])),
            ("ArrayDocuments read_pieces length", lambda v=v: docs.read_pieces([1], [0], [v])),
            ("open_input eos_id", lambda v=v: open_input(__file__, eos_id=v)),
            ("parse_config packing.ctx", lambda v=v: parse_config({"source": {"path": "x"}, "packing": {"ctx": v}})),
            ("to_format name", lambda v=v: to_format(batch, v)),
            ("to_format positions", lambda v=v: to_format(batch, "hf", positions=v)),
            ("to_format boundary_targets", lambda v=v: to_format(batch, "maxtext", boundary_targets=v)),
            ("read_maxtext_config max_target_length",
             lambda v=v: read_maxtext_config(None, [f"max_target_length={v}"])),
            ("read_maxtext_config per_device_batch_size",
             lambda v=v: read_maxtext_config(None, [f"per_device_batch_size={v}"])),
            ("read_maxtext_config override", lambda v=v: read_maxtext_config(None, [v])),
            ("maxtext_view lengths", lambda v=v: maxtext_view([v], MaxTextSettings())),
            ("pipeline_config max_target_length",
             lambda v=v: pipeline_config({"max_target_length": v, "global_batch_size_to_load": 8,
                                          "grain_train_files": "x"})),
            ("pipeline_config global_batch_size_to_load",
             lambda v=v: pipeline_config({"max_target_length": 64, "global_batch_size_to_load": v,
                                          "grain_train_files": "x"})),
            ("parse_config batch_size", lambda v=v: parse_config({"source": {"path": "x"}, "packing": {"ctx": 8},
                                                                  "batch_size": v})),
        ]
    short = tokens[:10]
    cases += [
        ("materialize tokens shorter than the offsets", lambda: materialize(plan, short, offsets)),
        ("materialize offsets far past the tokens", lambda: materialize(plan, tokens, offsets * 1000)),
        ("materialize decreasing offsets", lambda: materialize(plan, tokens, offsets[::-1])),
        ("materialize float tokens", lambda: materialize(plan, tokens.astype(float), offsets)),
        ("materialize ids above 2**31", lambda: materialize(plan, tokens.astype(np.int64) + 2**31, offsets)),
        ("ArrayDocuments float tokens", lambda: ArrayDocuments(tokens.astype(float), offsets)),
        ("ArrayDocuments decreasing offsets", lambda: ArrayDocuments(tokens, offsets[::-1])),
        ("ArrayDocuments ids above 2**31", lambda: ArrayDocuments(tokens.astype(np.int64) + 2**31, offsets)),
        ("ArrayDocuments offsets past the tokens", lambda: ArrayDocuments(tokens, offsets * 2)),
    ]
    return cases
