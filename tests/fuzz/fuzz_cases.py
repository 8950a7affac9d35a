"""The bad inputs the fuzz suite drives through every CLI subcommand and public function (shared with
scripts/fuzz_report.py, which tabulates the outcomes)."""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import numpy as np

EXTREME_INTS = [0, -1, 2**31, 2**40, 2**63, 2**64]
EXTREME_FLOATS = [math.nan, math.inf, -math.inf, 1e308]
WRONG_TYPES = ["x", "", "x" * 100_000, None, [1, 2], {"a": 1}, True, 3.5]
BAD_VALUES = EXTREME_INTS + EXTREME_FLOATS + WRONG_TYPES
CLI_VALUES = [str(v) for v in EXTREME_INTS] + ["nan", "inf", "", "x", "x" * 100_000, "1.5"]

YAML_BOMB = "\n".join(
    [
        f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]" if p else f"{c}: &{c} [{','.join(['lol'] * 9)}]"
        for p, c in zip([None, *"abcdefghi"], "abcdefghij")
    ]
)
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
    from datatools.base.progress import PLAIN_LINE
    from datatools.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    said = "".join(line for line in err.getvalue().splitlines(keepends=True) if not PLAIN_LINE.fullmatch(line.rstrip()))
    return status, out.getvalue(), said  # what the command said: progress lines (off a terminal) left out


def accepted_outcome(args: list[str], out: str, reference_store: str | Path) -> str:
    """What a CLI case that exited 0 produced, against a reference where one exists (outputs, not exit codes):
    ``checked: ...`` when it matches, ``wrong: ...`` when it does not (silently wrong), ``unchecked: ...`` when this
    case has no reference. The reference of ``analyze-padding`` on a store (the fuzz world's, or a copy whose damage
    leaves its lengths intact) is the world store's manifest: its first line must give that many documents and
    tokens. Other accepted commands (shuffle-report, pipeline, analyze-padding of the flat file) have none yet."""
    from datatools.io.formats.store import read_manifest

    if args[0] != "analyze-padding" or not (Path(args[1]) / "manifest.json").is_file():
        return f"unchecked: {args[0]} (no reference)"
    manifest = read_manifest(reference_store)
    docs, tokens = int(manifest["num_documents"]), int(manifest["num_tokens"])
    first = (out.splitlines()[0] if out else "").split("; ")[0]  # after "; ": the store's write order
    want = f"{args[1]}: {docs:,} documents, {tokens:,} tokens"
    return "checked: the store's documents and tokens" if first == want else f"wrong: {first[:120]!r}, not {want!r}"


def cli_cases(store: str, tmp: str) -> list[list[str]]:
    """Every integer option of every subcommand with every extreme value, and bad paths and strings."""
    cases = []
    for v in CLI_VALUES:
        for opt in ("--ctx", "--tile", "--buckets", "--max-segments", "--window"):
            cases.append(
                ["analyze-padding", store, opt, v, "--ctx", "256"]
                if opt != "--ctx"
                else ["analyze-padding", store, "--ctx", v]
            )
        cases.append(["analyze-padding", f"{tmp}/flat.bin", "--eos-id", v])
        base = {
            "--n": "1000",
            "--io-block-size": "8",
            "--window-blocks": "4",
            "--group-size": "8",
            "--batch-size": "16",
        }
        for opt in (*base, "--seed", "--epoch"):
            args = dict(base, **{opt: v})
            cases.append(["shuffle-report", *[x for kv in args.items() for x in kv]])
        for opt in ("--ctx", "--tile", "--workers"):
            cases.append(
                ["pretokenize", f"{tmp}/text", f"{tmp}/out-{len(cases)}", "--tokenizer", f"{tmp}/tok.json", opt, v]
                + (["--ctx", "256"] if opt == "--tile" else [])
            )
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
    from datatools import (
        BlockShuffle,
        FeistelPermutation,
        bucket_batch_sizes,
        bucket_batches,
        bucket_boundaries,
        choose_context,
        chunk,
        materialize,
        pack_lengths,
        tile_align,
    )
    from datatools.analysis.maxtext_simulation import MaxTextSettings, maxtext_view, read_maxtext_config
    from datatools.integrations.maxtext import pipeline_config
    from datatools.io import ArrayDocuments, InputOptions, open_documents, open_input, read_lengths
    from datatools.kernels.batch_layouts import to_format
    from datatools.pipeline import parse_config

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
            (
                "BlockShuffle io_block_size",
                lambda v=v: BlockShuffle(100, io_block_size=v, window_blocks=4, seed=0).index(0),
            ),
            (
                "BlockShuffle window_blocks",
                lambda v=v: BlockShuffle(100, io_block_size=8, window_blocks=v, seed=0).index(0),
            ),
            ("BlockShuffle index", lambda v=v: BlockShuffle(100, io_block_size=8, window_blocks=4, seed=0).index(v)),
            ("tile_align n", lambda v=v: tile_align(v, 128)),
            ("tile_align tile", lambda v=v: tile_align(100, v)),
            ("choose_context max_ctx", lambda v=v: choose_context(lengths, tile=128, max_ctx=v)),
            ("chunk ctx", lambda v=v: chunk(tokens[:100], v, tile=1)),
            ("chunk tile", lambda v=v: chunk(tokens[:100], 64, tile=v)),
            ("chunk bos", lambda v=v: chunk(tokens[:100], 64, tile=1, bos=v)),  # issue 21: never a negative id
            ("materialize plan", lambda v=v: materialize(v, tokens, offsets)),
            ("read_lengths input", lambda v=v: read_lengths(v)),  # issue 21: TypeError, not AttributeError
            ("open_documents input", lambda v=v: open_documents(v)),
            ("materialize rows", lambda v=v: materialize(plan, tokens, offsets, rows=[v])),
            ("materialize pad_id", lambda v=v: materialize(plan, tokens, offsets, pad_id=v)),
            ("ArrayDocuments read_pieces doc", lambda v=v: docs.read_pieces([v], [0], [1])),
            ("ArrayDocuments read_pieces start", lambda v=v: docs.read_pieces([1], [v], [1])),
            ("ArrayDocuments read_pieces length", lambda v=v: docs.read_pieces([1], [0], [v])),
            ("open_input eos_id", lambda v=v: open_input(__file__, InputOptions(eos_id=v))),
            ("parse_config packing.ctx", lambda v=v: parse_config({"source": {"path": "x"}, "packing": {"ctx": v}})),
            ("to_format name", lambda v=v: to_format(batch, v)),
            ("to_format positions", lambda v=v: to_format(batch, "hf", positions=v)),
            ("to_format boundary_targets", lambda v=v: to_format(batch, "maxtext", boundary_targets=v)),
            (
                "read_maxtext_config max_target_length",
                lambda v=v: read_maxtext_config(None, [f"max_target_length={v}"]),
            ),
            (
                "read_maxtext_config per_device_batch_size",
                lambda v=v: read_maxtext_config(None, [f"per_device_batch_size={v}"]),
            ),
            ("read_maxtext_config override", lambda v=v: read_maxtext_config(None, [v])),
            ("maxtext_view lengths", lambda v=v: maxtext_view([v], MaxTextSettings())),
            (
                "pipeline_config max_target_length",
                lambda v=v: pipeline_config(
                    {"max_target_length": v, "global_batch_size_to_load": 8, "grain_train_files": "x"}
                ),
            ),
            (
                "pipeline_config global_batch_size_to_load",
                lambda v=v: pipeline_config(
                    {"max_target_length": 64, "global_batch_size_to_load": v, "grain_train_files": "x"}
                ),
            ),
            (
                "parse_config batch_size",
                lambda v=v: parse_config({"source": {"path": "x"}, "packing": {"ctx": 8}, "batch_size": v}),
            ),
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
        ("materialize negative token ids", lambda: materialize(plan, tokens - 5, offsets)),
        ("chunk float tokens", lambda: chunk(tokens[:100].astype(float), 64, tile=1)),
        ("chunk negative token ids", lambda: chunk(tokens[:100] - 50, 64, tile=1)),
    ]
    return cases


# --------------------------------------------------------------------------- corrupt stores and a full disk (issue 21)


def _edit_manifest(store, **changes) -> None:
    import json

    m = json.loads((store / "manifest.json").read_text())
    m.update(changes)
    (store / "manifest.json").write_text(json.dumps(m))


def _flip(f, where: float = 0.5) -> None:
    data = bytearray(f.read_bytes())
    data[min(int(len(data) * where), len(data) - 1)] ^= 0x10
    f.write_bytes(bytes(data))


def _offsets_out_of_order(store) -> None:
    """Offsets swapped at one document with the chunk records rewritten to match: only the content checks see it."""
    import tensorstore as ts

    from datatools.io.formats.store import record_contents, zarr_spec

    arr = ts.open(zarr_spec(store / "offsets"), open=True).result()
    off = arr.read().result()
    off[10], off[11] = off[11], off[10]
    arr[:].write(off).result()
    _edit_manifest(store, **record_contents(store))


CORRUPT_STORES = {
    "tokens chunk deleted": lambda s: (s / "tokens" / "c" / "0").unlink(),
    "offsets chunk deleted": lambda s: (s / "offsets" / "c" / "0").unlink(),
    "tokens chunk truncated": lambda s: (s / "tokens" / "c" / "0").write_bytes(
        (s / "tokens" / "c" / "0").read_bytes()[:-100]
    ),
    "tokens chunk empty": lambda s: (s / "tokens" / "c" / "0").write_bytes(b""),
    "byte flipped in tokens": lambda s: _flip(s / "tokens" / "c" / "0"),
    "byte flipped in offsets": lambda s: _flip(s / "offsets" / "c" / "0", 0.3),
    "tokens/ deleted": lambda s: __import__("shutil").rmtree(s / "tokens"),
    "manifest num_tokens wrong": lambda s: _edit_manifest(s, num_tokens=12345),
    "manifest num_documents wrong": lambda s: _edit_manifest(s, num_documents=299),
    "manifest dtype wrong": lambda s: _edit_manifest(s, dtype="uint32"),
    "manifest without chunk records": lambda s: _edit_manifest(s, chunks=None),
    "offsets out of order": _offsets_out_of_order,
}


# damage to token bytes only: analyze-padding (lengths from the intact offsets alone, no token read) may answer,
# and its answer is right; every reader of tokens (pipeline, verify) refuses
LENGTHS_UNAFFECTED = {"tokens chunk truncated", "tokens chunk empty", "byte flipped in tokens"}


def corrupt_store_commands(store, tmp, name: str) -> tuple[str, list[list[str]]]:
    """A copy of ``store`` damaged as CORRUPT_STORES[name] says, and the commands that read it (each must exit 2
    with one line naming the copy: never 0 with wrong data)."""
    import shutil

    copy = tmp / ("corrupt-" + name.replace(" ", "-").replace("/", ""))
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(store, copy)
    CORRUPT_STORES[name](copy)
    config = tmp / f"{copy.name}.yaml"
    config.write_text(f"source: {{path: {copy}}}\npacking: {{ctx: 512}}\nbatch_size: 2\n")
    return str(copy), [
        ["verify", str(copy)],
        ["analyze-padding", str(copy), "--ctx", "256"],
        ["pipeline", str(config), "--steps", "3", "--workers", "0"],
    ]


def disk_full_outcome(tmp) -> tuple[str, int, str, bool]:
    """``pretokenize`` onto a full disk: a real 2 MiB tmpfs where one can be mounted (root), else tensorstore's
    ENOSPC error simulated at the commit. Returns (how, status, stderr, output left behind)."""
    import json
    import subprocess

    from conftest import stdlib_texts

    src = tmp / "disk-full-input"
    src.mkdir(exist_ok=True)
    texts = stdlib_texts(90)
    for i in range(4):
        (src / f"{i}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[i::4]))
    mnt = tmp / "disk-full-tmpfs"
    mnt.mkdir(exist_ok=True)
    try:
        mounted = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, timeout=20
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        mounted = False
    out = mnt / "out"
    args = ["pretokenize", str(src), str(out), "--tokenizer", str(tmp / "tok.json")]
    if mounted:
        try:
            status, _, err = run_cli(args)
            return "tmpfs 2 MiB", status, err, out.exists()
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=20)
    import datatools.io.formats.store as store_mod

    real = store_mod._create

    def full(path, dtype, length, chunk, *inner):
        raise ValueError(
            f"RESOURCE_EXHAUSTED: Error writing local file \"{path}/c/0\": No space left on device [os_error_code='28']"
        )

    store_mod._create = full
    try:
        status, _, err = run_cli(args)
    finally:
        store_mod._create = real
    return "simulated ENOSPC", status, err, out.exists()


# --------------------------------------------------------------------------- links, alias bombs, duplicate keys,
# --------------------------------------------------------------------------- bad NumPy dirs, empty inputs (issue 21)


def alias_bomb(levels: int, width: int) -> str:
    """A pipeline config whose ``bucketing.boundaries`` is ``levels`` nested lists of ``width`` aliases each:
    width**levels values from (levels - 1) * width aliases (9 levels of 9: 72 aliases, under the old cap of 100)."""
    anchors = [f"  l0: &l0 [{', '.join(['1'] * width)}]"]
    anchors += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "x:\n" + "\n".join(anchors) + f"\nsource: {{path: STORE}}\nbucketing: {{boundaries: *l{levels - 1}}}\n"


def _jsonl(path, count: int, column: str = "input_ids") -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(
            json.dumps({column: list(range(2, 3 + i % 9)) if column == "input_ids" else f"t{i}"}) + "\n"
            for i in range(count)
        )
    )


def _numpy_dir(d, tokens, **index) -> str:
    d.mkdir(parents=True, exist_ok=True)
    np.save(d / "tokens.npy", tokens)
    for name, values in index.items():
        np.save(d / f"{name}.npy", np.asarray(values, np.int64))
    return str(d)


def file_cases(store, tmp) -> list[dict]:
    """CLI runs on inputs that are wrong in their content or layout, each with what a clean outcome is:
    ``status`` (0: answered; 2: refused), ``names`` (what the one error line must name), ``docs`` (documents an
    answer must count: a symlink cycle must not multiply them), ``seconds`` (a bound), ``absent`` (what must not
    be left behind). Built under ``tmp``; ``store`` is the world's good store."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from datatools.io.formats.store import write_store

    root = tmp / "files"
    if root.exists():
        import shutil

        shutil.rmtree(root)
    cases: list[dict] = []

    def case(name, args, status, names=(), docs=None, seconds=30, absent=(), store=None):
        cases.append(
            {
                "name": name,
                "args": [str(a) for a in args],
                "status": status,
                "names": list(names),
                "docs": docs,
                "seconds": seconds,
                "absent": [str(a) for a in absent],
                "store": str(store) if store else None,
            }
        )

    def config(name, text):
        path = root / f"{name}.yaml"
        path.write_text(text.replace("STORE", str(store)))
        return path

    # symlinks: a cycle to the directory itself, a link to the parent (outside the root), a link to a sibling
    _jsonl(root / "cycle" / "a.jsonl", 25)
    os.symlink(".", root / "cycle" / "self")
    _jsonl(root / "up-parent" / "outside.jsonl", 7)
    _jsonl(root / "up-parent" / "d" / "a.jsonl", 5)
    os.symlink("..", root / "up-parent" / "d" / "up")
    _jsonl(root / "deep" / "x" / "y" / "a.jsonl", 4)
    os.symlink("../..", root / "deep" / "x" / "y" / "back")
    os.symlink("x", root / "deep" / "again")
    for name, d, docs in (
        ("symlink to itself", root / "cycle", 25),
        ("symlink to '..'", root / "up-parent" / "d", 5),
        ("symlinks to ancestors and siblings", root / "deep", 4),
    ):
        case(f"analyze-padding: {name}", ["analyze-padding", d, "--json", "-"], 0, docs=docs)
        cfg = config(
            name.replace(" ", "-").replace("'", ""),
            f"source: {{path: {d}}}\npacking: {{ctx: 64}}\nbatch_size: 1\nshuffle: {{kind: none}}\n",
        )
        case(f"pipeline: {name}", ["pipeline", cfg, "--steps", "1", "--workers", "0", "--json", "-"], 0, docs=docs)
    _jsonl(root / "text-cycle" / "a.jsonl", 25, column="text")
    os.symlink(".", root / "text-cycle" / "self")
    os.symlink("..", root / "text-cycle" / "up")
    out = root / "out-text-cycle"
    case(
        "pretokenize: symlinks to itself and to '..'",
        ["pretokenize", root / "text-cycle", out, "--tokenizer", tmp / "tok.json"],
        0,
        docs=25,
        store=out,
    )
    # alias bombs under the old alias cap, and duplicate keys
    for levels, width in ((9, 9), (8, 8)):
        cfg = config(f"bomb-{levels}x{width}", alias_bomb(levels, width))
        case(
            f"pipeline: alias bomb {levels} levels of {width}",
            ["pipeline", cfg, "--steps", "1"],
            2,
            names=[cfg.name, "expands"],
            seconds=5,
        )
    cfg = config("duplicate-top", "source: {path: STORE}\npacking: {ctx: 512}\nbatch_size: 2\nbatch_size: 4\n")
    case("pipeline: duplicate top-level key", ["pipeline", cfg, "--steps", "1"], 2, names=[cfg.name, "'batch_size'"])
    cfg = config("duplicate-nested", "source: {path: STORE}\npacking: {ctx: 512, ctx: 1024}\nbatch_size: 2\n")
    case("pipeline: duplicate nested key", ["pipeline", cfg, "--steps", "1"], 2, names=[cfg.name, "'ctx'"])
    # NumPy directories: ids outside [0, 2**31 - 1], lengths.npy and offsets.npy that disagree
    good = np.arange(2, 42, dtype=np.int64)
    for label, bad in (("negative id", -1), ("id 2**40", 2**40), ("id 2**31", 2**31)):
        tokens = good.copy()
        tokens[17] = bad
        d = _numpy_dir(root / f"np-{label.replace(' ', '-').replace('*', '')}", tokens, lengths=[10, 30])
        case(f"analyze-padding: NumPy {label}", ["analyze-padding", d], 2, names=["tokens.npy", str(bad)])
        cfg = config(f"np-{label.replace(' ', '-').replace('*', '')}", f"source: {{path: {d}}}\npacking: {{ctx: 64}}\n")
        case(f"pipeline: NumPy {label}", ["pipeline", cfg, "--steps", "1", "--workers", "0"], 2, names=["tokens.npy"])
    d = _numpy_dir(root / "np-disagree", good, lengths=[10, 30], offsets=[0, 15, 40])
    case(
        "analyze-padding: NumPy lengths.npy and offsets.npy disagree",
        ["analyze-padding", d],
        2,
        names=["lengths.npy", "offsets.npy"],
    )
    # inputs of zero documents
    (root / "empty.jsonl").write_bytes(b"")
    (root / "blank.jsonl").write_text("\n \n")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), root / "none.parquet")
    (root / "empty-dir").mkdir()
    (root / "empty-dir" / "a.jsonl").write_bytes(b"")
    np_empty = _numpy_dir(root / "np-empty", np.zeros(0, np.int32), lengths=[])
    empty_store = root / "empty-store"
    write_store(
        empty_store,
        [(np.zeros(0, np.uint16), np.zeros(0, np.int64))],
        num_tokens=0,
        num_documents=0,
        dtype=np.uint16,
        manifest={"vocab_size": 1 << 16},
    )
    for path in (
        root / "empty.jsonl",
        root / "blank.jsonl",
        root / "none.parquet",
        root / "empty-dir",
        np_empty,
        empty_store,
    ):
        label = os.path.basename(path)
        case(f"analyze-padding: no documents ({label})", ["analyze-padding", path], 2, names=[label, "no documents"])
        cfg = config(f"empty-{label}", f"source: {{path: {path}}}\npacking: {{ctx: 64}}\n")
        case(f"pipeline: no documents ({label})", ["pipeline", cfg, "--steps", "1"], 2, names=[label, "no documents"])
        if label.endswith(("jsonl", "parquet", "dir")):
            out = root / f"out-empty-{label}"
            case(
                f"pretokenize: no documents ({label})",
                ["pretokenize", path, out, "--tokenizer", tmp / "tok.json"],
                2,
                names=[label, "no documents"],
                absent=[out, f"{out}.partial"],
            )
    return cases


def listing_with_sizes(root) -> dict[str, int]:
    """Every path under ``root`` (links not followed) with its size: what "nothing destroyed" compares."""
    import os

    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = os.lstat(p).st_size if not os.path.isdir(p) or os.path.islink(p) else -1
    return out


def file_case_outcome(case: dict, status: int, out: str, err: str, seconds: float | None) -> str:
    """``clean ...`` or what went wrong (the report's and the test's verdict on one file case). ``seconds`` None:
    untimed (``make test`` checks no wall time; the ``timing`` test and the report pass the seconds it took)."""
    import json
    import os

    if "Traceback" in err or "Traceback" in out:
        return "traceback"
    if status != case["status"]:
        return f"exit {status} (expected {case['status']}): {err.strip()[:80]}"
    if seconds is not None and seconds > case["seconds"]:
        return f"took {seconds:.1f} s (bound {case['seconds']} s)"
    if any(os.path.exists(p) for p in case["absent"]):
        return "left output behind"
    if status:  # one error line, last (progress lines may come first: a slow run off a terminal prints them)
        lines = err.splitlines()
        if (
            not lines
            or sum(line.startswith("datatools: error: ") for line in lines) != 1
            or not lines[-1].startswith("datatools: error: ")
        ):
            return f"not one error line: {err[-80:]}"
        err = lines[-1]
        missing = [n for n in case["names"] if n not in err]
        return f"the line does not name {missing}" if missing else f"clean (exit {status}, one line)"
    if case.get("store"):
        from datatools.io.formats.store import read_manifest

        got = read_manifest(case["store"])["num_documents"]
    elif case["docs"] is not None:
        report = json.loads(out)
        got = report.get("num_sequences", report.get("documents"))
    if case["docs"] is not None and got != case["docs"]:
        return f"counted {got} documents, not {case['docs']}"
    return "clean (exit 0, right answer)"


# --------------------------------------------------------------------------- permissions, as a non-root user


NOBODY = 65534  # uid and gid the permission cases run as (when the suite runs as root: via setpriv)


def permission_cases(base, tokenizer) -> list[dict]:
    """Files a non-root user may not read or write, under ``base`` (a directory every user can traverse, outside
    any private one), and the runs on them: each must exit 1 (the environment) with one line naming the file,
    leaving nothing. ``tokenizer`` is copied there, readable."""
    import shutil

    from conftest import stdlib_texts

    base.chmod(0o755)
    texts = stdlib_texts(4)
    _jsonl(base / "data" / "a.jsonl", 6)
    (base / "data" / "a.jsonl").chmod(0)
    _jsonl(base / "tree" / "ok.jsonl", 6)
    _jsonl(base / "tree" / "sub" / "b.jsonl", 6)
    (base / "tree" / "sub").chmod(0)
    _numpy_dir(base / "np", np.arange(2, 22, dtype=np.int32), lengths=[5, 15])
    (base / "np" / "tokens.npy").chmod(0)
    import json

    (base / "text").mkdir()
    (base / "text" / "t.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (base / "text" / "t.jsonl").chmod(0)
    (base / "text-ok").mkdir()
    (base / "text-ok" / "t.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    shutil.copy(tokenizer, base / "tok.json")
    (base / "tok.json").chmod(0o644)
    (base / "secret-tok.json").write_text("{}")
    (base / "secret-tok.json").chmod(0)
    _jsonl(base / "readable" / "a.jsonl", 6)
    (base / "locked").mkdir()
    (base / "locked").chmod(0o555)  # root's directory: the user may read it, not write in it
    (base / "secret.yaml").write_text(f"source: {{path: {base / 'readable'}}}\npacking: {{ctx: 64}}\n")
    (base / "secret.yaml").chmod(0)
    (base / "to-secret.yaml").write_text(f"source: {{path: {base / 'data'}}}\npacking: {{ctx: 64}}\n")
    cases = []

    def case(name, args, names, absent=()):
        cases.append(
            {
                "name": name,
                "args": [str(a) for a in args],
                "status": 1,
                "names": [str(n) for n in names],
                "docs": None,
                "seconds": 60,
                "absent": [str(a) for a in absent],
            }
        )

    case("analyze-padding: unreadable file", ["analyze-padding", base / "data" / "a.jsonl"], ["a.jsonl"])
    case("analyze-padding: unreadable file in a directory", ["analyze-padding", base / "data"], ["a.jsonl"])
    case("analyze-padding: unreadable subdirectory", ["analyze-padding", base / "tree"], ["sub"])
    case("analyze-padding: unreadable tokens.npy", ["analyze-padding", base / "np"], ["tokens.npy"])
    case(
        "analyze-padding: --json into a directory not writable",
        ["analyze-padding", base / "readable", "--json", base / "locked" / "r.json"],
        ["r.json"],
        absent=[base / "locked" / "r.json"],
    )
    case("pipeline: unreadable config", ["pipeline", base / "secret.yaml", "--steps", "1"], ["secret.yaml"])
    case(
        "pipeline: unreadable source",
        ["pipeline", base / "to-secret.yaml", "--steps", "1", "--workers", "0"],
        ["a.jsonl"],
    )
    case(
        "pretokenize: unreadable input",
        ["pretokenize", base / "text", base / "out-1", "--tokenizer", base / "tok.json"],
        ["t.jsonl"],
        absent=[base / "out-1", base / "out-1.partial"],
    )
    case(
        "pretokenize: unreadable tokenizer",
        ["pretokenize", base / "text-ok", base / "out-2", "--tokenizer", base / "secret-tok.json"],
        ["secret-tok.json"],
        absent=[base / "out-2", base / "out-2.partial"],
    )
    case(
        "pretokenize: output in a directory not writable",
        ["pretokenize", base / "text-ok", base / "locked" / "out", "--tokenizer", base / "tok.json"],
        ["out"],
        absent=[base / "locked" / "out", base / "locked" / "out.partial"],
    )
    return cases


_RUNNER = """import contextlib, io, json, site, sys, time
site.addsitedir(sys.argv[1]); sys.path.insert(0, sys.argv[2])
from datatools.cli import main
results = []
for args in json.loads(sys.argv[3]):
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    results.append([status, out.getvalue(), err.getvalue(), time.perf_counter() - t0])
print(json.dumps(results))
"""


def run_as_user(commands: list[list[str]], home) -> list[tuple[int, str, str, float]] | str:
    """Run ``datatools`` commands as a non-root user (this user when not root; else uid/gid 65534 through
    ``setpriv``), all in one process: ``[(status, stdout, stderr, seconds)]``, or why they could not run."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[2])
    site = sysconfig.get_paths()["purelib"]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "NUMBA_CACHE_DIR": f"{home}/numba",
        "MPLCONFIGDIR": f"{home}/mpl",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    warmed = os.environ.get("NUMBA_CACHE_DIR", "")
    if warmed and os.path.isdir(warmed):  # the suite's compiled kernels (make warm-kernels): none compiled again
        shutil.copytree(warmed, f"{home}/numba", dirs_exist_ok=True)
    for d in ("numba", "mpl"):  # caches the user can write
        os.makedirs(f"{home}/{d}", exist_ok=True)
        for p in [Path(f"{home}/{d}"), *Path(f"{home}/{d}").rglob("*")]:
            p.chmod(0o777 if p.is_dir() else 0o666)
    argv = [site, repo, json.dumps(commands)]
    if os.geteuid() != 0:
        proc = subprocess.run(
            [sys.executable, "-c", _RUNNER, *argv], capture_output=True, text=True, env=env, timeout=600
        )
    else:
        if shutil.which("setpriv") is None:
            return "no setpriv"
        drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        candidates = [
            sys.executable,
            os.path.realpath(sys.executable),
            shutil.which(version) or "",
            f"/usr/bin/{version}",
            f"/usr/local/bin/{version}",
        ]
        python = next(
            (
                p
                for p in candidates
                if p
                and subprocess.run(
                    [*drop, p, "-c", "import sys; assert sys.version_info[:2] == " + repr(tuple(sys.version_info[:2]))],
                    capture_output=True,
                    env=env,
                ).returncode
                == 0
            ),
            None,
        )
        if python is None:
            return f"no {version} the user {NOBODY} can run"
        proc = subprocess.run(
            [*drop, python, "-c", _RUNNER, *argv], capture_output=True, text=True, env=env, timeout=600
        )
    if proc.returncode != 0:
        return f"runner failed: {proc.stderr.strip()[-300:]}"
    return [tuple(r) for r in json.loads(proc.stdout.splitlines()[-1])]
