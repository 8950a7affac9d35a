"""Reading inputs: throughput and peak memory of datatools' streaming readers against the plain library call.

1. The same documents (distribution (b): lognormal median 400, mean ~800 tokens, ids
   < 50,000) written as Parquet (list<int32>, row groups of 16k rows), JSON Lines,
   an Arrow IPC file, a Hugging Face ``save_to_disk`` directory and a NumPy
   directory. For each: datatools' lengths pass (``read_lengths(open_input(PATH))``,
   what ``analyze-padding`` runs: values checked, bounded memory) against the best
   plain call for the same column: ``pyarrow.parquet.read_table(columns=[...])``,
   ``pyarrow.json.read_json`` (threaded, explicit schema, block size above the
   longest line), ``pyarrow.ipc.open_file(memory_map).read_all()``,
   ``datasets.load_from_disk``, ``numpy.load``; each followed by the list lengths.
   Every measurement runs in a fresh process (peak RSS = its ru_maxrss), 3 runs,
   median. Target: >= 0.8x the plain call's MB/s for Parquet and JSON Lines.
2. A 1 GB JSON Lines file through ``datatools analyze-padding`` (the CLI, all 8
   strategies at ctx 2048): seconds and peak RSS. Bound: peak RSS minus the CLI's
   baseline (the same command on a 1-line file) <= 1.5 x the lengths' bytes + 256 MiB.
3. A Parquet source of 500M tokens (2.0 GB as int32) through a streaming pipeline
   (storage order, best fit decreasing within windows of 1024 documents whose rows are
   mixed, ctx 2048, batch 32): startup (the lengths pass), batches/s and peak RSS of
   the process against the data size. (Shuffled access to a table decodes a row group
   per read: pre-tokenize large data into a token store for that.)
4. Remote: the same documents (``--remote-mb`` of JSON text) as Parquet, JSON Lines and a
   token store (``write_store``), local files against ``s3://`` on moto's S3 API server,
   started here on a free 127.0.0.1 port (stopped at the end) with the standard AWS
   variables: datatools' lengths pass for all three, and for the store also a read of
   every document's tokens (``TokenStore.read`` over all documents, 4096 at a
   time). Fresh process each, local and remote alternating, 3 runs, median: seconds,
   MB/s, peak RSS and remote time / local time. moto on loopback stands in for S3:
   the ratio is the overhead of our remote path (HTTP, ranged reads, a Python server),
   not S3's bandwidth or latency.

    python benchmarks/read.py [--mb 400] [--jsonl-gb 1] [--pipeline-tokens 500000000] [--runs 3] [--remote-mb 200]
    python benchmarks/read.py --only remote    # one section alone, merged into results/read.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from _common import distribution, print_table, write_json

HERE = Path(__file__).resolve().parent
COLUMN = "input_ids"
SECTIONS = ("formats", "jsonl", "pipeline", "remote")
MiB = 1 << 20


# --------------------------------------------------------------------------- one measurement (child process)


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the parent across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(fmt: str, path: str, who: str) -> dict:
    import datasets  # noqa: F401  (imports are not timed)
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from datatools.io import open_input, read_lengths

    t0 = time.perf_counter()
    if who == "datatools":
        lengths = read_lengths(open_input(path))
        n_docs, n_tokens = int(lengths.size), int(lengths.sum())
    else:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            col = pq.read_table(path, columns=[COLUMN]).column(0)
        elif fmt == "jsonl":
            import pyarrow.json as pj

            longest = int(os.environ.get("LONGEST_LINE", 1 << 20))
            col = pj.read_json(
                path,
                read_options=pj.ReadOptions(block_size=max(1 << 20, 2 * longest)),
                parse_options=pj.ParseOptions(
                    explicit_schema=pa.schema([(COLUMN, pa.list_(pa.int64()))]), unexpected_field_behavior="ignore"
                ),
            ).column(0)
        elif fmt == "arrow":
            col = pa.ipc.open_file(pa.memory_map(path)).read_all().column(COLUMN)
        elif fmt == "hf":
            import datasets

            col = datasets.load_from_disk(path).data.column(COLUMN)
        else:
            lengths = np.diff(np.load(Path(path) / "offsets.npy", allow_pickle=False))
            col = None
        if col is not None:
            lengths = pc.list_value_length(col).to_numpy()
        n_docs, n_tokens = int(lengths.size), int(lengths.sum())
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rss_mib": peak_rss_mib(), "docs": n_docs, "tokens": n_tokens}


def run_child(args: list[str], env: dict | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode:
        raise SystemExit(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- data


def make_docs(target_bytes: int, seed: int = 0) -> list[np.ndarray]:
    """Documents of distribution (b) until about ``target_bytes`` of JSON text (6 bytes a token)."""
    n = max(10, target_bytes // (6 * 800))
    lengths, _ = distribution("b", n, seed=seed)
    rng = np.random.default_rng(seed)
    flat = rng.integers(0, 50000, int(lengths.sum()), dtype=np.int32)
    return np.split(flat, np.cumsum(lengths)[:-1])


def write_jsonl(path: Path, docs) -> None:
    with open(path, "w") as f:
        for i, d in enumerate(docs):
            f.write(f'{{"id": {i}, "{COLUMN}": [{",".join(map(str, d.tolist()))}]}}\n')


def write_all(tmp: Path, docs) -> dict[str, Path]:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({COLUMN: pa.array(docs, pa.list_(pa.int32()))})
    pq.write_table(table, tmp / "t.parquet", row_group_size=16384)
    write_jsonl(tmp / "t.jsonl", docs)
    with pa.OSFile(str(tmp / "t.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=16384)
    datasets.Dataset(table).save_to_disk(str(tmp / "hf"))
    (tmp / "np").mkdir()
    lengths = np.array([d.size for d in docs])
    np.save(tmp / "np" / "tokens.npy", np.concatenate(docs))
    np.save(tmp / "np" / "offsets.npy", np.concatenate(([0], np.cumsum(lengths))))
    return {
        "parquet": tmp / "t.parquet",
        "jsonl": tmp / "t.jsonl",
        "arrow": tmp / "t.arrow",
        "hf": tmp / "hf",
        "numpy": tmp / "np",
    }


def size_of(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- sections


def formats_section(tmp: Path, mb: int, runs: int) -> dict:
    docs = make_docs(mb * MiB)
    paths = write_all(tmp, docs)
    os.sync()  # written data reaches the disk before timing: writeback would slow whichever runs first
    time.sleep(2)
    want_docs, want_tokens = len(docs), int(sum(d.size for d in docs))
    longest = str(max(len(line) for line in open(paths["jsonl"], "rb")))
    rows, out = [], {}
    for fmt, path in paths.items():
        nbytes = size_of(path)
        runs_of: dict[str, list[dict]] = {"datatools": [], "peer": []}
        for _ in range(runs):  # alternate, so that both see the same machine state
            for who in runs_of:
                m = run_child(["--measure", fmt, str(path), who], env={"LONGEST_LINE": longest})
                assert (m["docs"], m["tokens"]) == (want_docs, want_tokens), (fmt, who, m)
                runs_of[who].append(m)
        res = {}
        for who, ms in runs_of.items():
            res[who] = {
                "seconds": float(np.median([m["seconds"] for m in ms])),
                "rss_mib": float(np.median([m["rss_mib"] for m in ms])),
            }
            res[who]["mb_s"] = nbytes / MiB / res[who]["seconds"]
        ratio = res["datatools"]["mb_s"] / res["peer"]["mb_s"]
        target = "PASS" if ratio >= 0.8 else "FAIL"
        out[fmt] = {"bytes": nbytes, **res, "ratio": ratio, "target": target if fmt in ("parquet", "jsonl") else None}
        rows.append(
            [
                fmt,
                f"{nbytes / MiB:,.0f}",
                f"{res['datatools']['mb_s']:,.0f}",
                f"{res['peer']['mb_s']:,.0f}",
                f"{ratio:.2f}x" + (f" ({target})" if fmt in ("parquet", "jsonl") else ""),
                f"{res['datatools']['rss_mib']:,.0f}",
                f"{res['peer']['rss_mib']:,.0f}",
            ]
        )
    print_table(
        f"Lengths of {want_docs:,} documents ({want_tokens:,} tokens), {runs} runs each, median",
        ["format", "MiB", "datatools MB/s", "plain call MB/s", "ratio", "datatools peak RSS MiB", "plain peak RSS MiB"],
        rows,
    )
    return {"docs": want_docs, "tokens": want_tokens, "formats": out}


def big_jsonl_section(tmp: Path, gb: float) -> dict:
    f = tmp / "big.jsonl"
    rng = np.random.default_rng(1)
    n_docs = n_tokens = 0
    with open(f, "w") as out:
        while out.tell() < gb * (1 << 30):
            for d in make_docs(32 * MiB, seed=int(rng.integers(1 << 30))):
                out.write(f'{{"id": {n_docs}, "{COLUMN}": [{",".join(map(str, d.tolist()))}]}}\n')
                n_docs += 1
                n_tokens += d.size
    tiny = tmp / "tiny.jsonl"
    tiny.write_text('{"input_ids": [1, 2, 3]}\n')
    base = run_child(["--cli-rss", str(tiny)])
    big = run_child(["--cli-rss", str(f)])
    rep = json.loads(big["stdout"])
    assert rep["num_sequences"] == n_docs and rep["num_tokens"] == n_tokens, (rep["num_sequences"], n_docs)
    lengths_mib = n_docs * 8 / MiB
    bound = base["rss_mib"] + 1.5 * lengths_mib + 256
    ok = big["rss_mib"] <= bound
    print_table(
        "A 1 GB JSON Lines file through `datatools analyze-padding --ctx 2048` (one run)",
        ["file", "documents", "tokens", "seconds", "MB/s", "peak RSS MiB", "baseline RSS MiB", "bound MiB"],
        [
            [
                f"{size_of(f) / MiB:,.0f} MiB",
                n_docs,
                n_tokens,
                f"{big['seconds']:.1f}",
                f"{size_of(f) / MiB / big['seconds']:,.0f}",
                f"{big['rss_mib']:,.0f}",
                f"{base['rss_mib']:,.0f}",
                f"{bound:,.0f} ({'PASS' if ok else 'FAIL'})",
            ]
        ],
    )
    return {
        "bytes": size_of(f),
        "docs": n_docs,
        "tokens": n_tokens,
        "seconds": big["seconds"],
        "rss_mib": big["rss_mib"],
        "baseline_rss_mib": base["rss_mib"],
        "bound_mib": bound,
        "pass": ok,
    }


def cli_rss(path: str) -> dict:
    """analyze-padding in this process (the child): seconds, its stdout JSON, peak RSS."""
    import contextlib
    import io

    from datatools.cli import main

    buf = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        status = main(["analyze-padding", path, "--ctx", "2048", "--json", "-"])
    if status:
        raise SystemExit(f"analyze-padding {path} exited {status}")
    return {"seconds": time.perf_counter() - t0, "stdout": buf.getvalue(), "rss_mib": peak_rss_mib()}


def pipeline_section(tmp: Path, tokens: int, steps: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp / "large.parquet"
    schema = pa.schema([(COLUMN, pa.list_(pa.int32()))])
    written, seed = 0, 0
    with pq.ParquetWriter(f, schema, compression="none") as w:
        while written < tokens:
            lengths, _ = distribution("b", 65536, seed=seed)
            rng = np.random.default_rng(seed)
            flat = rng.integers(0, 50000, int(lengths.sum()), dtype=np.int32)
            offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))).astype(np.int32))
            w.write_table(pa.table({COLUMN: pa.ListArray.from_arrays(offsets, pa.array(flat))}), row_group_size=16384)
            written += flat.size
            seed += 1
    res = run_child(["--pipeline", str(f), str(steps)])
    data_mib = written * 4 / MiB
    print_table(
        f"A streaming pipeline over a Parquet source of {written:,} tokens (one run, {steps} batches of 32 x 2048)",
        ["source", "tokens as int32 MiB", "file MiB", "startup s", "batches/s", "peak RSS MiB", "RSS / data"],
        [
            [
                "parquet",
                f"{data_mib:,.0f}",
                f"{size_of(f) / MiB:,.0f}",
                f"{res['startup_s']:.1f}",
                f"{steps / res['steps_s']:.1f}",
                f"{res['rss_mib']:,.0f}",
                f"{res['rss_mib'] / data_mib:.2f}",
            ]
        ],
    )
    return {"tokens": written, "data_mib": data_mib, "file_mib": size_of(f) / MiB, **res}


def run_pipeline(path: str, steps: int) -> dict:
    from datatools.pipeline import build

    t0 = time.perf_counter()
    it = iter(
        build(
            {
                "source": {"path": path},
                "packing": {"ctx": 2048, "mode": "streaming", "window": 1024},
                "shuffle": {"kind": "none"},
                "batch_size": 32,
                "num_epochs": 1,
            }
        )
    )
    first = next(it)
    startup = time.perf_counter() - t0
    real = int((first["segment_ids"] > 0).sum())
    t1 = time.perf_counter()
    for _ in range(steps - 1):
        real += int((next(it)["segment_ids"] > 0).sum())
    return {"startup_s": startup, "steps_s": time.perf_counter() - t1, "real_tokens": real, "rss_mib": peak_rss_mib()}


# --------------------------------------------------------------------------- remote: moto's S3 server on loopback

AWS_VARS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
)
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "eu-west-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}  # nothing of the caller's AWS setup
STORE_READ_DOCS = 4096  # documents per TokenStore.read in the tokens pass (~3.3M tokens, ~3 chunks)
REMOTE_ROWS = (
    ("jsonl", "bytes"),
    ("parquet", "lengths"),
    ("jsonl", "lengths"),
    ("store", "lengths"),
    ("store", "tokens"),
)
PASS_LABELS = {
    "bytes": "bytes only (Location.open)",
    "lengths": "lengths pass",
    "tokens": "all tokens (read)",
}


@contextmanager
def s3_server(tmp: Path, ranged_reads: bool = False) -> Iterator[str]:
    """moto's S3 API server (``moto[server]``, from this venv) on a free 127.0.0.1 port; yields its URL, then stops
    it (terminate, then kill after 10 s). ``ranged_reads``: a ranged GET reads only its range (moto reads the whole
    object; see ``benchmarks/_moto_ranged.py``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
    with open(tmp / "moto_server.log", "wb") as log:
        proc = subprocess.Popen(
            [
                *(
                    [sys.executable, str(Path(__file__).resolve().parent / "_moto_ranged.py")]
                    if ranged_reads
                    else [str(Path(sys.executable).parent / "moto_server")]
                ),
                *("-H", "127.0.0.1", "-p", str(port)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = (tmp / "moto_server.log").read_text()[-2000:]
                    raise SystemExit(f"moto_server did not start: {log}") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def measure_remote(what: str, path: str) -> dict:
    """One pass over ``path`` (local or ``s3://``) in this (fresh) process: ``lengths`` is the lengths pass
    (``read_lengths(open_input(path))``), ``tokens`` reads a token store's every document with
    ``TokenStore.read`` in ranges of :data:`STORE_READ_DOCS`, ``bytes`` reads the file's bytes through
    ``Location.open`` (what the JSON Lines reader reads through) in 8 MiB reads and parses nothing: the
    transport alone. Seconds, peak RSS (MiB), and what was read (documents, tokens, the sum of the token ids;
    bytes) so local and remote can be checked equal."""
    import pyarrow.parquet  # noqa: F401  (imports are not timed)
    import s3fs  # noqa: F401

    from datatools.io import open_input, read_lengths, storage
    from datatools.io.formats.store import TokenStore

    t0 = time.perf_counter()
    if what == "bytes":
        n_docs = n_tokens = id_sum = 0
        with storage.location(path).open() as f:
            while block := f.read(8 * MiB):
                n_tokens += len(block)  # bytes, here
    elif what == "lengths":
        lengths = read_lengths(open_input(path))
        n_docs, n_tokens, id_sum = int(lengths.size), int(lengths.sum()), None
    else:
        store = TokenStore(path)
        n_docs, n_tokens, id_sum = len(store), 0, 0
        offsets = store.offsets
        for start in range(0, n_docs, STORE_READ_DOCS):
            flat = store.read(int(offsets[start]), int(offsets[min(n_docs, start + STORE_READ_DOCS)]))
            n_tokens += int(flat.size)
            id_sum += int(flat.sum(dtype=np.int64))
    return {
        "seconds": time.perf_counter() - t0,
        "rss_mib": peak_rss_mib(),
        "docs": n_docs,
        "tokens": n_tokens,
        "id_sum": id_sum,
    }


def machine() -> dict:
    """The CPU model, cores and memory of this machine (for the printed header and the JSON)."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30) if hasattr(os, "sysconf") else None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem, 1) if mem else None,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def remote_section(tmp: Path, mb: int, runs: int) -> dict:
    """Parquet, JSON Lines and a token store of the same documents, local against ``s3://`` on moto's server on
    loopback (same data, same run, alternating): seconds, MB/s, peak RSS, remote/local time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datatools.io import storage
    from datatools.io.formats.store import token_dtype, write_store

    docs = make_docs(mb * MiB, seed=2)
    lengths = np.array([d.size for d in docs], np.int64)
    flat = np.concatenate(docs)
    local = {"parquet": tmp / "r.parquet", "jsonl": tmp / "r.jsonl", "store": tmp / "rstore"}
    pq.write_table(pa.table({COLUMN: pa.array(docs, pa.list_(pa.int32()))}), local["parquet"], row_group_size=16384)
    write_jsonl(local["jsonl"], docs)
    dtype = token_dtype(50000)

    def put_store(where) -> None:
        write_store(
            where,
            [(flat, lengths)],
            num_tokens=int(flat.size),
            num_documents=len(docs),
            dtype=dtype,
            manifest={"vocab_size": 50000},
        )

    put_store(local["store"])
    mach, saved = machine(), {k: os.environ.get(k) for k in (*AWS_VARS, *S3_ENV)}
    with s3_server(tmp) as endpoint:
        for k in AWS_VARS:
            os.environ.pop(k, None)
        os.environ.update(S3_ENV, AWS_ENDPOINT_URL=endpoint)  # the children inherit it (local ones too: same setup)
        try:
            fs, _ = storage.location("s3://bench").filesystem()
            fs.mkdir("bench")
            remote = {"parquet": "s3://bench/r.parquet", "jsonl": "s3://bench/r.jsonl", "store": "s3://bench/rstore"}
            t0 = time.perf_counter()
            for fmt in ("parquet", "jsonl"):
                fs.put_file(str(local[fmt]), remote[fmt][len("s3://") :])
            put_store(remote["store"])
            upload_s = time.perf_counter() - t0
            assert (
                storage.location(remote["store"] + "/manifest.json").read_bytes()
                == (local["store"] / "manifest.json").read_bytes()
            ), "the local and remote stores differ"
            os.sync()
            time.sleep(2)
            load_before = os.getloadavg()
            out, rows = {}, []
            for fmt, what in REMOTE_ROWS:
                if fmt == "store" and what == "lengths":  # the lengths pass reads the offsets (and lists the arrays)
                    nbytes = size_of(local["store"] / "offsets")
                else:
                    nbytes = size_of(local[fmt])
                ms: dict[str, list[dict]] = {"local": [], "remote": []}
                for _ in range(runs):  # alternate, so that both see the same machine state
                    for where, path in (("local", str(local[fmt])), ("remote", remote[fmt])):
                        m = run_child(["--measure-remote", what, path])
                        want = (0, nbytes) if what == "bytes" else (len(docs), int(flat.size))
                        assert (m["docs"], m["tokens"]) == want, (fmt, what, where, m)
                        ms[where].append(m)
                assert len({m["id_sum"] for m in ms["local"] + ms["remote"]}) == 1, (fmt, what, "ids differ")
                res = {}
                for where, got in ms.items():
                    sec = float(np.median([m["seconds"] for m in got]))
                    res[where] = {
                        "seconds": sec,
                        "mb_s": nbytes / MiB / sec,
                        "rss_mib": float(np.median([m["rss_mib"] for m in got])),
                        "all_seconds": [m["seconds"] for m in got],
                    }
                ratio = res["remote"]["seconds"] / res["local"]["seconds"]
                out[f"{fmt} {what}"] = {
                    "format": fmt,
                    "pass": what,
                    "bytes": nbytes,
                    **res,
                    "remote_over_local_time": ratio,
                }
                rows.append(
                    [
                        fmt,
                        PASS_LABELS[what],
                        f"{nbytes / MiB:,.1f}",
                        f"{res['local']['seconds']:.2f}",
                        f"{res['remote']['seconds']:.2f}",
                        f"{res['local']['mb_s']:,.0f}",
                        f"{res['remote']['mb_s']:,.0f}",
                        f"{ratio:.2f}x",
                        f"{res['local']['rss_mib']:,.0f}",
                        f"{res['remote']['rss_mib']:,.0f}",
                    ]
                )
            load_after = os.getloadavg()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    print(
        f"machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory_gib']} GiB, {mach['os']}; "
        f"load average (1/5/15 min) before {', '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {', '.join(f'{x:.2f}' for x in load_after)}"
    )
    print_table(
        f"Local files against s3:// on moto's S3 server on loopback: {len(docs):,} documents "
        f"({flat.size:,} tokens), {runs} runs each in a fresh process, alternating, median "
        f"(upload {upload_s:.1f} s)",
        [
            "input",
            "pass",
            "MiB",
            "local s",
            "s3 s",
            "local MB/s",
            "s3 MB/s",
            "s3 / local time",
            "local peak RSS MiB",
            "s3 peak RSS MiB",
        ],
        rows,
    )
    return {
        "docs": len(docs),
        "tokens": int(flat.size),
        "runs": runs,
        "statistic": "median",
        "machine": mach,
        "loadavg_before": list(load_before),
        "loadavg_after": list(load_after),
        "upload_s": upload_s,
        "server": "moto_server on 127.0.0.1",
        "rows": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=400, help="JSON Lines size of the format comparison (MiB)")
    parser.add_argument("--jsonl-gb", type=float, default=1.0)
    parser.add_argument("--pipeline-tokens", type=int, default=500_000_000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--remote-mb",
        type=int,
        default=200,
        help="JSON Lines size of the local-against-S3 comparison (MiB; Parquet and store are ~1/3)",
    )
    parser.add_argument(
        "--sections",
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated: {', '.join(SECTIONS)} (a partial run updates those keys of "
        f"results/read.json and keeps the others)",
    )
    parser.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--measure-remote", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--cli-rss", help=argparse.SUPPRESS)
    parser.add_argument("--pipeline", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    if args.measure_remote:
        print(json.dumps(measure_remote(*args.measure_remote)))
        return
    if args.cli_rss:
        print(json.dumps(cli_rss(args.cli_rss)))
        return
    if args.pipeline:
        print(json.dumps(run_pipeline(args.pipeline[0], int(args.pipeline[1]))))
        return
    sections = set(args.sections.split(","))
    if not sections <= set(SECTIONS):
        unknown = ", ".join(sorted(sections - set(SECTIONS)))
        parser.error(f"--sections: unknown {unknown} (one of {', '.join(SECTIONS)})")
    previous = HERE / "results" / "read.json"
    results = json.loads(previous.read_text()) if previous.exists() and sections != set(SECTIONS) else {}
    results.pop("machine", None)
    with tempfile.TemporaryDirectory(dir=HERE.parent) as tmp:
        tmp = Path(tmp)
        if "formats" in sections:
            results["formats"] = formats_section(tmp, args.mb, args.runs)
        if "jsonl" in sections:
            results["jsonl_1gb"] = big_jsonl_section(tmp, args.jsonl_gb)
        if "pipeline" in sections:
            results["pipeline_parquet"] = pipeline_section(tmp, args.pipeline_tokens, args.steps)
        if "remote" in sections:
            results["remote"] = remote_section(tmp, args.remote_mb, args.runs)
    print(f"results written to {write_json('read', results)}")


if __name__ == "__main__":
    main()
