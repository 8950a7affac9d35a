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
        verdict = _verdict(run, 0, seconds=300)
        if not verdict.startswith("clean"):
            return verdict
        from datatools.io.formats.store import read_manifest

        manifest = read_manifest(root / "line-out")  # the output against the input: one document, of tokens
        if manifest["num_documents"] != 1 or manifest["num_tokens"] < 1:
            return f"silently wrong ({manifest['num_documents']} documents, {manifest['num_tokens']} tokens)"
        return "clean (exit 0, the line stored as 1 document)"

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

    # item 1: every store error names a command that repairs; that very command is run
    yield from repair_named_cases(root, t)

    # item 3: reads that verify what they read
    yield from read_integrity_cases(root)

    # item 2: a bucket root (a real S3 server: moto)
    yield from bucket_root_cases(root, t)

    # item 8: tokenizers of a mixture, token ids over 2^31, weights near 1e308, --workers 64
    yield from smaller_cases(root, store, tokenizer, texts)


def _repair_line(err: str, inputs: Path, tokenizer: Path) -> list[str] | None:
    """The command after ``repair:`` in the error line as ``datatools`` arguments (placeholders of a store whose
    manifest does not read filled with the job's input and tokenizer), or None when the line names none."""
    import shlex

    lines = [x for x in err.splitlines() if x.startswith("datatools: error:")]
    if not lines or "; repair: datatools pretokenize " not in lines[-1]:
        return None
    command = lines[-1].split("; repair: ", 1)[1].split(" (the job that wrote it)")[0]
    command = command.replace("INPUTS...", shlex.quote(str(inputs))).replace("TOKENIZER", shlex.quote(str(tokenizer)))
    return shlex.split(command)[1:]


def repair_named_cases(root: Path, t: list) -> Iterator[tuple[str, Callable[[], str]]]:
    """Each of 9 kinds of damage: ``verify`` refuses it (exit 2, one line ending in a repair command); the command
    it names, run as written, rebuilds the store byte-identical and ``verify`` then passes."""

    def files(out: Path) -> dict:
        return {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def flip(f: Path) -> None:
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0xFF
        f.write_bytes(bytes(data))

    def edit(f: Path) -> None:
        m = json.loads(f.read_text())
        m["num_documents"] -= 1
        f.write_text(json.dumps(m))

    harms: dict[str, Callable[[Path], None]] = {
        "tokens chunk deleted": lambda s: (s / "tokens" / "c" / "0").unlink(),
        "tokens chunk truncated": lambda s: (s / "tokens" / "c" / "0").write_bytes(b"\x00" * 10),
        "tokens chunk emptied": lambda s: (s / "tokens" / "c" / "0").write_bytes(b""),
        "byte flipped in a tokens chunk": lambda s: flip(s / "tokens" / "c" / "0"),
        "offsets chunk deleted": lambda s: (s / "offsets" / "c" / "0").unlink(),
        "offsets metadata deleted": lambda s: (s / "offsets" / "zarr.json").unlink(),
        "tokens metadata truncated": lambda s: (s / "tokens" / "zarr.json").write_bytes(b'{"zarr'),
        "manifest disagrees with the arrays": lambda s: edit(s / "manifest.json"),
        "manifest no longer JSON": lambda s: (s / "manifest.json").write_bytes(b'{"format": "datatools-tok'),
    }

    def case(name: str) -> str:
        out = root / f"named-{name.replace(' ', '-')}"
        inputs = root / "one.jsonl"
        first = run_measured(["pretokenize", inputs, out, *t], seconds=120)
        if first.status != 0:
            return f"first run failed: {first.err[-80:]}"
        intact = files(out)
        harms[name](out)
        refused = run_measured(["verify", out], seconds=120)
        verdict = _verdict(refused, 2, [str(out)])
        if not verdict.startswith("clean"):
            return f"verify: {verdict}"
        args = _repair_line(refused.err, inputs, t[1])
        if args is None:
            return "the error names no repair command"
        repaired = run_measured(args, seconds=120)
        if repaired.status != 0:
            return f"the named command failed: exit {repaired.status}: {repaired.err[-80:]}"
        if files(out) != intact:
            return "silently wrong (the named command did not repair)"
        again = run_measured(["verify", out], seconds=120)
        return "clean (exit 2 naming the repair; repaired byte-identical)" if again.status == 0 else "still damaged"

    for name in harms:
        yield f"the command a store error names repairs it ({name})", lambda n=name: case(n)


def _shards_store(path: Path, values: list[int]) -> None:
    """A store of ``len(values)`` stored objects (shards), shard k all ``values[k]``: the same compressed sizes."""
    from datatools.io.formats.store import TOKEN_CHUNK, write_store

    flat = np.repeat(np.asarray(values, np.uint16), TOKEN_CHUNK)
    lengths = np.full(len(values) * 8, TOKEN_CHUNK // 8, np.int64)
    write_store(
        path, [(flat, lengths)], num_tokens=flat.size, num_documents=lengths.size, dtype=np.uint16,
        manifest={"vocab_size": 1000},
    )  # fmt: skip


def read_integrity_cases(root: Path) -> Iterator[tuple[str, Callable[[], str]]]:
    """A chunk swapped with another of the same size, one from another store, one rewritten through tensorstore:
    ``pipeline`` refuses each (exit 2, one line naming the chunk), never trains on it."""

    def pipeline(store: Path, chunk: str) -> str:
        cfg = root / f"{store.name}.yaml"
        cfg.write_text(
            f"source: {{path: {store}}}\npacking: {{ctx: 4096, mode: streaming}}\nbatch_size: 64\n"
            "shuffle: {kind: none}\n"
        )
        run = run_measured(["pipeline", cfg, "--steps", "40", "--workers", "0"], seconds=180)
        if run.status == 0:
            return "silently wrong (read as data)"
        return _verdict(run, 2, [chunk], seconds=180)

    def swapped() -> str:
        s = root / "swapped"
        _shards_store(s, [3, 4, 5])
        a, b = s / "tokens" / "c" / "0", s / "tokens" / "c" / "1"
        da, db = a.read_bytes(), b.read_bytes()
        a.write_bytes(db)
        b.write_bytes(da)
        return pipeline(s, "tokens/c/0")

    def foreign() -> str:
        s, o = root / "foreign", root / "foreign-other"
        _shards_store(s, [3, 4, 5])
        _shards_store(o, [3, 9, 5])
        shutil.copyfile(o / "tokens" / "c" / "1", s / "tokens" / "c" / "1")
        return pipeline(s, "tokens/c/1")

    def rewritten() -> str:
        import tensorstore as ts

        from datatools.io.formats.store import TOKEN_CHUNK, zarr_spec

        s = root / "rewritten"
        _shards_store(s, [3, 4, 5])
        arr = ts.open(zarr_spec(s / "tokens"), open=True).result()
        arr[TOKEN_CHUNK : 2 * TOKEN_CHUNK].write(np.full(TOKEN_CHUNK, 8, np.uint16)).result()
        return pipeline(s, "tokens/c/1")

    yield "a chunk swapped with another of the same size: pipeline", swapped
    yield "a chunk of another store: pipeline", foreign
    yield "a chunk rewritten through tensorstore: pipeline", rewritten


@contextmanager
def _moto(root: Path) -> Iterator[str]:
    """A moto S3 server on loopback for the cases' children; its URL."""
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(root / "moto.log", "wb")  # noqa: SIM115 -- closed below
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start: {(root / 'moto.log').read_text()[-200:]}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def bucket_root_cases(root: Path, t: list) -> Iterator[tuple[str, Callable[[], str]]]:
    """``--overwrite`` of a store at a bucket root holding other objects: refused, every object kept, no other
    bucket touched; a store at an otherwise empty bucket root: written, then replaced, within that bucket."""
    import boto3

    def client(endpoint: str):
        return boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
            region_name="eu-west-1",
        )  # fmt: skip

    def objects(c, bucket: str) -> dict:
        keys = [o["Key"] for o in c.list_objects_v2(Bucket=bucket).get("Contents", [])]
        return {k: c.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}

    def refused() -> str:
        with _moto(root) as endpoint:
            c, env = client(endpoint), _s3_env(endpoint)
            c.create_bucket(Bucket="root-refused", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
            first = run_measured(["pretokenize", root / "one.jsonl", "s3://root-refused", *t], seconds=120, env=env)
            if first.status != 0:
                return f"first run failed: {first.err[-80:]}"
            c.put_object(Bucket="root-refused", Key="unrelated/data.txt", Body=b"someone else's")
            before = objects(c, "root-refused")
            run = run_measured(
                ["pretokenize", root / "aaa.jsonl", "s3://root-refused", *t, "--overwrite"], seconds=120, env=env
            )
            verdict = _verdict(run, 2, ["unrelated/data.txt"])
            if objects(c, "root-refused") != before:
                return "destructive (objects changed or deleted)"
            if [x["Name"] for x in c.list_buckets()["Buckets"]] != ["root-refused"]:
                return "another bucket was used"
            return verdict

    def replaced() -> str:
        with _moto(root) as endpoint:
            c, env = client(endpoint), _s3_env(endpoint)
            c.create_bucket(Bucket="root-replaced", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
            for inputs, extra in ((root / "one.jsonl", []), (root / "aaa.jsonl", ["--overwrite"])):
                run = run_measured(["pretokenize", inputs, "s3://root-replaced", *t, *extra], seconds=120, env=env)
                if run.status != 0:
                    return f"exit {run.status}: {run.err.strip()[-100:]}"
            keys = set(objects(c, "root-replaced"))
            if any(k.startswith(".partial") for k in keys) or [x["Name"] for x in c.list_buckets()["Buckets"]] != [
                "root-replaced"
            ]:
                return "staging left or another bucket used"
            ok = run_measured(["verify", "s3://root-replaced"], seconds=120, env=env)
            return "clean (exit 0, written and replaced in its bucket)" if ok.status == 0 else "store unreadable"

    yield "--overwrite at a bucket root holding other objects (S3)", refused
    yield "a store at a bucket root written and replaced in that bucket (S3)", replaced


def smaller_cases(
    root: Path, store: Path, tokenizer: Path, texts: list[str]
) -> Iterator[tuple[str, Callable[[], str]]]:
    """Stores of two tokenizers mixed, token ids of 2^40, weights near 1e308, ``--workers 64``."""

    def mixed_tokenizers() -> str:
        from datatools.jobs.demo_data import train_tokenizer

        other = train_tokenizer(texts[:1], root / "other-tok.json", vocab_size=280)
        a, b = root / "mix-a", root / "mix-b"
        for out, tok in ((a, tokenizer), (b, other)):
            if not out.exists():
                run = run_measured(["pretokenize", root / "one.jsonl", out, "--tokenizer", tok], seconds=120)
                if run.status != 0:
                    return f"pretokenize failed: {run.err[-80:]}"
        cfg = root / "mix.yaml"
        cfg.write_text(
            f"sources:\n  - {{path: {a}, weight: 1}}\n  - {{path: {b}, weight: 1}}\n"
            "packing: {ctx: 256, mode: streaming}\nbatch_size: 2\n"
        )
        run = run_measured(["pipeline", cfg, "--steps", "1", "--workers", "0"], seconds=120)
        return "silently wrong (mixed)" if run.status == 0 else _verdict(run, 2, ["mix-a", "mix-b"], seconds=120)

    def huge_ids() -> str:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = root / "ids.parquet"
        pq.write_table(pa.table({"input_ids": [[1, 2, 1 << 40], [3, 4]]}), path)
        run = run_measured(["analyze-padding", path, "--ctx", "64"], seconds=120)
        return "silently wrong (accepted)" if run.status == 0 else _verdict(run, 2, ["ids.parquet"], seconds=120)

    def huge_weights() -> str:
        cfg = root / "weights.yaml"
        cfg.write_text(
            f"sources:\n  - {{path: {store}, weight: 1.0e+308, name: a}}\n  - {{path: {store}, weight: 5.0e+307, "
            "name: b}\npacking: {ctx: 512, mode: streaming}\nbatch_size: 4\n"
        )
        run = run_measured(["mix-report", cfg, "--batches", "5", "--json", "-"], seconds=120)
        if run.status != 0:
            return _verdict(run, 0)
        weights = [s["weight"] for s in json.loads(run.out)["sources"]]
        ok = abs(weights[0] - 2 / 3) < 1e-9 and abs(weights[1] - 1 / 3) < 1e-9
        return "clean (exit 0, weights 2/3 and 1/3)" if ok else f"silently wrong (weights {weights})"

    def many_workers() -> str:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from datatools.io.formats.store import TokenStore
        from datatools.io.sources.documents import StoreDocuments

        table = root / "workers.parquet"  # token ids in a table: read in workers (a token store refuses them)
        docs = [np.asarray(StoreDocuments(TokenStore(store))[i], np.int32) for i in range(50)]
        pq.write_table(pa.table({"input_ids": pa.array(docs, pa.list_(pa.int32()))}), table)
        cfg = root / "workers.yaml"
        cfg.write_text(f"source: {{path: {table}}}\npacking: {{ctx: 512, mode: streaming}}\nbatch_size: 2\n")
        run = run_measured(["pipeline", cfg, "--steps", "2", "--workers", "64"], seconds=300, max_rss=8 << 30)
        verdict = _verdict(run, 0, seconds=240, rss=8 << 30)
        if verdict.startswith("clean") and "capped at" not in run.err:
            return "no word of the cap"
        return verdict.replace("clean (exit 0", "clean (exit 0, capped with its reason")

    yield "stores of two tokenizers mixed: pipeline", mixed_tokenizers
    yield "token id 2^40 in a token column: analyze-padding", huge_ids
    yield "weights near 1e308: mix-report", huge_weights
    yield "--workers 64: pipeline", many_workers
