"""The cases of issue 36 for scripts/fuzz_report.py: each runs ``datatools`` in a child process (time and peak
memory measured, tests/fuzz/bounded.py) on something crafted, and says ``clean ...`` or what went wrong. The tests
of each fix are tests/cli/test_native_failures.py, tests/io/test_storage_timeouts.py, tests/fuzz/test_issue36.py,
tests/io/test_plan_integrity.py, tests/jobs/test_overwrite_safety.py and tests/jobs/test_pretokenize_repair.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from bounded import Measured, run_measured

GiB = 1 << 30


def _verdict(run: Measured, status: int, names=(), seconds: float = 60, rss: int = GiB) -> str:
    if run.status is None:
        return f"hung or over {rss >> 20} MiB (killed after {run.seconds:.0f} s)"
    if "Traceback" in run.err or "panicked" in run.err:
        return "traceback"
    if run.status != status:
        return f"exit {run.status} (expected {status}): {run.err.strip()[-80:]}"
    if run.seconds > seconds:
        return f"took {run.seconds:.0f} s (bound {seconds:.0f} s)"
    if run.peak_rss > rss:
        return f"{run.peak_rss >> 20} MiB (bound {rss >> 20} MiB)"
    if status:
        line = run.one_error_line()
        if line is None:
            return "not one error line"
        missing = [n for n in names if n not in line]
        if missing:
            return f"the line does not name {missing}"
    return f"clean (exit {status}{', one line' if status else ''})"


@contextmanager
def silent_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for c in held:
            c.close()
        server.close()


def _s3_env(endpoint: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TENSORSTORE_", "STORAGE_EMULATOR"))}
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION="eu-west-1",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    return env


def issue36_cases(tmp: Path, store: Path, tokenizer: Path, texts: list[str]) -> Iterator[tuple[str, Callable[[], str]]]:
    """(where, run) for each case; ``store`` and ``tokenizer`` are the fuzz world's (tests/fuzz/fuzz_cases.py)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    root = tmp / "issue36"
    root.mkdir(exist_ok=True)

    # item 6: a tokenizer whose pre-tokenizer regex panics in Rust (Oniguruma's retry limit)
    tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("(a+)+b"), "isolated")
    tok.save(str(root / "panic.json"))
    (root / "aaa.jsonl").write_text("".join(json.dumps({"text": "a" * 30 + "c"}) + "\n" for _ in range(3)))
    panic = ["--tokenizer", root / "panic.json"]
    yield (
        "panicking tokenizer: analyze-padding",
        lambda: _verdict(run_measured(["analyze-padding", root / "aaa.jsonl", *panic], seconds=60), 2, ["panic.json"]),
    )
    yield (
        "panicking tokenizer: pretokenize",
        lambda: _verdict(
            run_measured(["pretokenize", root / "aaa.jsonl", root / "panic-out", *panic], seconds=60), 2, ["panic.json"]
        ),
    )
    cfg = root / "panic.yaml"
    cfg.write_text(
        f"source: {{path: {root / 'aaa.jsonl'}, tokenizer: {root / 'panic.json'}}}\npacking: {{ctx: 64}}\n"
        "batch_size: 1\nshuffle: {kind: none}\n"
    )
    yield (
        "panicking tokenizer: pipeline",
        lambda: _verdict(
            run_measured(["pipeline", cfg, "--steps", "1", "--workers", "0"], seconds=60), 2, ["panic.json"]
        ),
    )

    # item 5: an endpoint that accepts connections and never answers
    def silent(args, url):
        with silent_endpoint() as endpoint:
            return _verdict(run_measured(args, seconds=90, env=_s3_env(endpoint)), 1, [url], seconds=30)

    (root / "one.jsonl").write_text(json.dumps({"text": texts[0][:2000]}) + "\n")
    t = ["--tokenizer", tokenizer]
    yield (
        "silent S3 endpoint: analyze-padding",
        lambda: silent(["analyze-padding", "s3://bucket/docs.jsonl", *t], "s3://bucket/docs.jsonl"),
    )
    yield (
        "silent S3 endpoint: pretokenize",
        lambda: silent(["pretokenize", root / "one.jsonl", "s3://bucket/store", *t], "s3://bucket/store"),
    )
    yield "silent S3 endpoint: verify", lambda: silent(["verify", "s3://bucket/store"], "s3://bucket/store")

    # item 7: bounded metadata reads, a huge cell, a huge line
    def urandom_manifest(command):
        copy = root / f"urandom-{command}"
        shutil.copytree(store, copy)
        (copy / "manifest.json").unlink()
        os.symlink("/dev/urandom", copy / "manifest.json")
        return _verdict(run_measured([command, copy], seconds=120), 2, [str(copy)])

    yield "manifest linked to /dev/urandom: verify", lambda: urandom_manifest("verify")
    yield "manifest linked to /dev/urandom: analyze-padding", lambda: urandom_manifest("analyze-padding")

    def sparse_manifest():
        copy = root / "sparse-manifest"
        shutil.copytree(store, copy)
        with open(copy / "manifest.json", "r+b") as f:
            f.truncate(8 * GiB)
        return _verdict(run_measured(["verify", copy], seconds=120), 2, ["manifest.json"])

    yield "8 GiB manifest.json: verify", sparse_manifest

    def cell(command):
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = root / "cell.parquet"
        if not path.exists():
            pq.write_table(pa.table({"text": ["ab " * (100 << 20), "short"]}), path, compression="zstd")
        out = [root / "cell-out"] if command == "pretokenize" else []
        return _verdict(run_measured([command, path, *out, *t], seconds=120), 2, ["cell.parquet"])

    yield "one 300 MB Parquet cell: analyze-padding", lambda: cell("analyze-padding")
    yield "one 300 MB Parquet cell: pretokenize", lambda: cell("pretokenize")

    def long_line():
        rng = np.random.default_rng(0)
        letters = rng.choice(np.frombuffer(b"etaoinshrdlucmfwyp", np.uint8), size=50 << 20)
        letters[rng.random(letters.size) < 0.18] = ord(" ")
        (root / "line.jsonl").write_text(json.dumps({"text": letters.tobytes().decode()}) + "\n")
        del letters
        run = run_measured(["pretokenize", root / "line.jsonl", root / "line-out", *t], seconds=600)
        return _verdict(run, 0, seconds=300)

    yield "one 50 MB line: pretokenize", long_line

    # item 4: plan files
    def plan_case(harm, name):
        plan = root / f"plan-{name}-{harm.__name__}"
        status = run_measured(["pack", store, plan, "--ctx", "512"], seconds=120)
        if status.status != 0:
            return f"pack failed: {status.err[-80:]}"
        harm(plan)
        cfg = root / f"{plan.name}.yaml"
        cfg.write_text(f"source: {{path: {store}}}\npacking: {{plan: {plan}}}\nbatch_size: 2\n")
        return _verdict(run_measured(["pipeline", cfg, "--steps", "2", "--workers", "0"], seconds=120), 2, [name])

    def doc_value(plan):
        arr = np.load(plan / "doc.npy", mmap_mode="r+")
        arr[0] = arr[1]
        arr.flush()

    def lower_length(plan):
        arr = np.load(plan / "length.npy", mmap_mode="r+")
        i = int(np.argmax(arr))
        arr[i] -= 10
        arr.flush()

    def align_0(plan):
        header = json.loads((plan / "plan.json").read_text())
        header["align"] = 0
        (plan / "plan.json").write_text(json.dumps(header))

    yield "plan: an edited doc.npy value", lambda: plan_case(doc_value, "doc.npy")
    yield "plan: a length lowered by 10", lambda: plan_case(lower_length, "length.npy")
    yield "plan: align 0 in the header", lambda: plan_case(align_0, "plan.json")

    # item 2: local --overwrite never deletes a user's file
    def user_file_in_store(copied_manifest: bool):
        where = root / ("copied-manifest" if copied_manifest else "store-with-notes")
        if copied_manifest:
            (where / "offsets").mkdir(parents=True)
            shutil.copy(store / "manifest.json", where / "manifest.json")
        else:
            shutil.copytree(store, where)
        (where / "notes.txt").write_text("mine")
        run = run_measured(["pretokenize", root / "one.jsonl", where, *t, "--overwrite"], seconds=120)
        verdict = _verdict(run, 2, ["notes.txt"])
        kept = (where / "notes.txt").exists() and (where / "notes.txt").read_text() == "mine"
        return verdict if kept else "deleted the user's file"

    yield "local --overwrite: a user's file in a store", lambda: user_file_in_store(False)
    yield "local --overwrite: a user's file beside a copied manifest", lambda: user_file_in_store(True)

    # item 1: the rerun of the same job repairs a damaged store
    def repair(harm_name):
        out = root / f"repair-{harm_name.replace(' ', '-')}"
        args = ["pretokenize", root / "one.jsonl", out, *t]
        first = run_measured(args, seconds=120)
        if first.status != 0:
            return f"first run failed: {first.err[-80:]}"
        intact = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
        key = out / "tokens" / "c" / "0"
        if harm_name == "chunk deleted":
            key.unlink()
        elif harm_name == "chunk truncated":
            key.write_bytes(key.read_bytes()[:10])
        else:
            data = bytearray(key.read_bytes())
            data[len(data) // 2] ^= 0xFF
            key.write_bytes(bytes(data))
        again = run_measured(args + (["--check"] if harm_name == "byte flipped" else []), seconds=120)
        if again.status != 0:
            return f"exit {again.status}: {again.err[-80:]}"
        after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
        return "clean (exit 0, repaired byte-identical)" if after == intact else "silently wrong (not repaired)"

    for harm_name in ("chunk deleted", "chunk truncated", "byte flipped"):
        yield f"rerun on a damaged store ({harm_name})", lambda h=harm_name: repair(h)
