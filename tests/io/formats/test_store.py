"""The token store knows its own content: chunk records, checks on open, on read and in full (verify);
tensorstore's I/O failures as OSError; atomic writes name their destination; short reprs."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import datatools.io.formats.store as store_mod
from conftest import store_documents, write_test_store
from datatools.io import storage
from datatools.io.formats.store import TokenStore, chunk_records, read_manifest, write_store
from datatools.io.formats.store_verify import verify_store
from datatools.io.storage.io_errors import as_os_error

SMALL = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture()
def small_chunks(monkeypatch):
    """Chunks of 64 tokens (shards of 4 inner chunks of 16) / 16 offsets, so a small store has many chunks."""
    monkeypatch.setattr(store_mod, "TOKEN_CHUNK", 64)
    monkeypatch.setattr(store_mod, "READ_CHUNK", 16)
    monkeypatch.setattr(store_mod, "OFFSET_CHUNK", 16)


def docs_strategy(max_vocab: int = 1000):
    return st.lists(st.lists(st.integers(0, max_vocab - 1), min_size=0, max_size=150), min_size=1, max_size=40)


def stored_keys(path: Path) -> list[tuple[str, str]]:
    """(array, key) of every recorded key, from the manifest."""
    chunks = read_manifest(path)["chunks"]
    return [(name, key) for name in ("tokens", "offsets") for key in sorted(chunks[name])]


def read_everything(path: Path) -> tuple[np.ndarray, np.ndarray]:
    s = TokenStore(path)
    flat, off = store_documents(s, 0, len(s))
    return flat, off


def manifest_edit(path: Path, **changes) -> None:
    m = json.loads((path / "manifest.json").read_text())
    m.update(changes)
    (path / "manifest.json").write_text(json.dumps(m))


# --------------------------------------------------------------------------- the records


@SMALL
@given(docs=docs_strategy())
def test_records_cover_every_stored_key_and_a_whole_store_verifies(tmp_path_factory, small_chunks, docs):
    path = write_test_store(tmp_path_factory.mktemp("s") / "store", docs, vocab_size=1000)
    m = read_manifest(path)
    assert m["version"] == store_mod.VERSION
    for name in ("tokens", "offsets"):
        on_disk = {str(p.relative_to(path / name)) for p in (path / name).rglob("*") if p.is_file()}
        assert set(m["chunks"][name]) == on_disk  # every chunk stored (an all-zero one too) and recorded
        for key, (size, _) in m["chunks"][name].items():
            assert (path / name / key).stat().st_size == size
    report = verify_store(path)
    n_tokens = sum(map(len, docs))
    assert (report.documents, report.tokens) == (len(docs), n_tokens)
    assert report.max_token == (max(max(d) for d in docs if d) if n_tokens else None)
    flat, off = read_everything(path)
    assert flat.tolist() == [t for d in docs for t in d]
    assert np.diff(off).tolist() == [len(d) for d in docs]


def test_records_are_deterministic(tmp_path):
    docs = [list(range(i, i + 50)) for i in range(30)]
    a = write_test_store(tmp_path / "a", docs)
    b = write_test_store(tmp_path / "b", docs)
    assert read_manifest(a)["chunks"] == read_manifest(b)["chunks"] == chunk_records(a)


# --------------------------------------------------------------------------- damage is never silent


DAMAGE = ("delete", "truncate", "flip", "empty")


def damage(path: Path, name: str, key: str, how: str, where: float) -> None:
    f = path / name / key
    data = bytearray(f.read_bytes())
    if how == "delete":
        f.unlink()
    elif how == "truncate":
        f.write_bytes(bytes(data[: int(len(data) * where)]))
    elif how == "flip":
        data[min(int(len(data) * where), len(data) - 1)] ^= 0x10
        f.write_bytes(bytes(data))
    else:
        f.write_bytes(b"")


@SMALL
@given(docs=docs_strategy(), pick=st.integers(0, 10_000), how=st.sampled_from(DAMAGE), where=st.floats(0, 0.99))
def test_any_damaged_chunk_is_named_never_read_as_data(tmp_path_factory, small_chunks, docs, pick, how, where):
    path = write_test_store(tmp_path_factory.mktemp("s") / "store", docs, vocab_size=1000)
    expected = ([t for d in docs for t in d], [len(d) for d in docs])
    keys = stored_keys(path)
    name, key = keys[pick % len(keys)]
    damage(path, name, key, how, where)
    # verify names the store and the damaged key
    with pytest.raises(ValueError) as exc:
        verify_store(path)
    msg = str(exc.value)
    assert str(path) in msg and (f"{name}/{key}" in msg if key != "zarr.json" else f"{name}/" in msg), msg
    # reading: an error naming the store, or (a byte of metadata that changes nothing read) the very same data
    try:
        flat, off = read_everything(path)
    except ValueError as e:
        assert str(path) in str(e)
        if key != "zarr.json":
            assert f"{name}/{key}" in str(e) or f"{name}/c/" in str(e) or "disagrees" in str(e), str(e)
    else:
        assert key == "zarr.json"
        assert (flat.tolist(), np.diff(off).tolist()) == expected


def test_a_deleted_chunk_is_refused_on_open_and_on_read(tmp_path, small_chunks):
    path = write_test_store(tmp_path / "s", [list(range(100)) for _ in range(10)])
    (path / "tokens" / "c" / "3").unlink()
    with pytest.raises(ValueError, match=r"s: chunk tokens/c/3 is missing"):
        TokenStore(path)
    unchecked = TokenStore(path, check=False)  # a chunk lost after open: the read refuses it, no zeros
    with pytest.raises(ValueError, match=r"s: chunk tokens/c/3 is missing"):
        unchecked.read(0, 1000)
    np.testing.assert_array_equal(unchecked.read(0, 64), np.arange(64))


def test_a_flipped_byte_is_refused_on_read(tmp_path, small_chunks):
    path = write_test_store(tmp_path / "s", [list(range(100)) for _ in range(10)])
    damage(path, "tokens", "c/2", "flip", 0.5)
    store = TokenStore(path)  # present, so open passes: the read checks the chunk's crc32c
    with pytest.raises(ValueError, match=r"chunk tokens/c/2 is corrupt"):
        store.read(128, 192)  # the whole object: the flipped byte sits in one of its inner chunks


def test_offsets_chunk_deleted_is_refused(tmp_path, small_chunks):
    path = write_test_store(tmp_path / "s", [list(range(10)) for _ in range(40)])
    (path / "offsets" / "c" / "0").unlink()
    with pytest.raises(ValueError, match=r"chunk offsets/c/0 is missing"):
        TokenStore(path).lengths()
    with pytest.raises(ValueError, match=r"chunk offsets/c/0 is missing"):
        TokenStore(path, check=False).lengths()


# --------------------------------------------------------------------------- manifest against arrays


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"num_tokens": 1001}, "tokens/ disagrees with the manifest"),
        ({"num_documents": 11}, "offsets/ disagrees with the manifest"),
        ({"dtype": "uint32"}, "tokens/ disagrees with the manifest"),
        ({"chunks": {"checksum": "sha256", "tokens": {}, "offsets": {}}}, "no chunk records for tokens/"),
        ({"chunks": None}, "no chunk records"),
        ({"version": 4}, "version 4 is not supported"),
    ],
)
def test_a_manifest_that_disagrees_with_the_arrays_is_refused(tmp_path, changes, message):
    path = write_test_store(tmp_path / "s", [list(range(100)) for _ in range(10)])
    manifest_edit(path, **changes)
    with pytest.raises(ValueError, match=message):
        TokenStore(path)


def test_a_record_missing_from_the_manifest_is_refused(tmp_path, small_chunks):
    path = write_test_store(tmp_path / "s", [list(range(100)) for _ in range(10)])
    chunks = read_manifest(path)["chunks"]
    del chunks["tokens"]["c/5"]
    manifest_edit(path, chunks=chunks)
    with pytest.raises(ValueError, match="manifest disagrees with the arrays: it has no record of tokens/c/5"):
        TokenStore(path)


def rewrite_array(path: Path, name: str, values: np.ndarray) -> None:
    """Overwrite an array's content in place and re-record the chunks (a store whose records are right but
    whose content is wrong: what only the content checks can catch)."""
    arr = ts.open(store_mod.zarr_spec(path / name), open=True).result()
    arr[:].write(values).result()
    manifest_edit(path, **store_mod.record_contents(path))


def test_offsets_out_of_order_are_refused(tmp_path, small_chunks):
    path = write_test_store(tmp_path / "s", [list(range(10)) for _ in range(40)])
    off = TokenStore(path).offsets.copy()
    off[20], off[21] = off[21], off[20]
    rewrite_array(path, "offsets", off)
    with pytest.raises(ValueError, match=r"chunk offsets/c/1 is corrupt \(offsets decrease at document 20"):
        verify_store(path)
    with pytest.raises(ValueError, match="offsets decrease"):
        TokenStore(path).lengths()
    off = np.arange(41) * 10
    off[0] = 3
    rewrite_array(path, "offsets", off)
    with pytest.raises(ValueError, match=r"offsets\[0\] is 3"):
        verify_store(path)


def test_tokens_beyond_the_vocabulary_are_refused_by_verify(tmp_path, small_chunks):
    path = write_test_store(tmp_path / "s", [list(range(100)) for _ in range(10)], vocab_size=1000)
    tokens = TokenStore(path).read(0, 1000)
    tokens[700] = 1000
    rewrite_array(path, "tokens", tokens)
    with pytest.raises(
        ValueError,
        match=r"chunk tokens/c/10 is corrupt \(token 700 is 1000, not below the "
        r"vocabulary size 1000\)",
    ):
        verify_store(path)


@pytest.mark.parametrize("version", [1, 2])
def test_a_store_of_an_older_version_is_refused_in_one_line_naming_the_job_that_rewrites_it(tmp_path, version):
    """Only the version pretokenize writes is read (issue 56): an older store (1: no records, 2: unsharded) is
    refused by readers and verify alike, in one line that names the pretokenize job with --overwrite."""
    path = write_test_store(tmp_path / "s", [list(range(100)) for _ in range(10)])
    m = json.loads((path / "manifest.json").read_text())
    m["version"] = version
    if version == 1:
        del m["chunks"]
    (path / "manifest.json").write_text(json.dumps(m))
    for read in (TokenStore, verify_store):
        with pytest.raises(ValueError, match=rf"token store version {version}, from an older datatools") as refused:
            read(path)
        assert "\n" not in str(refused.value) and str(refused.value).endswith("--overwrite (the job that wrote it)")


# --------------------------------------------------------------------------- the environment: OSError


def test_disk_full_while_writing_a_store_is_an_oserror_naming_the_file(small_tmpfs):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 1 << 16, 3_000_000).astype(np.uint16)  # 6 MB that zstd cannot shrink: > 2 MiB
    with pytest.raises(OSError) as exc:
        write_store(
            small_tmpfs / "s",
            [(tokens, np.array([tokens.size]))],
            num_tokens=tokens.size,
            num_documents=1,
            dtype=np.uint16,
            manifest={},
        )
    assert exc.value.errno == errno.ENOSPC and str(small_tmpfs / "s") in exc.value.filename
    assert "tensorstore_spec" not in str(exc.value)


def test_tensorstore_and_pyarrow_errors_map_to_oserror():
    full = ValueError(
        'RESOURCE_EXHAUSTED: Error writing local file "/x/s/tokens/c/1": Failed writing: '
        '"/x/s/tokens/c/1.__lock": Failed to write 9 bytes to file 4: No space left on device '
        "[os_error_code='28'] [tensorstore_spec='{...}']"
    )
    err = as_os_error(full)
    assert (err.errno, err.strerror, err.filename) == (errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/s/tokens/c/1")
    assert as_os_error(full, "/x/s").filename == "/x/s"
    denied = as_os_error(ValueError('PERMISSION_DENIED: Error opening file "/x/y": Permission denied'))
    assert isinstance(denied, PermissionError) and denied.filename == "/x/y"
    assert as_os_error(ValueError("DATA_LOSS: Digest mismatch")) is None  # bad data, not the environment
    assert as_os_error(ValueError("FAILED_PRECONDITION: dtype mismatch")) is None
    import pyarrow as pa

    io = as_os_error(pa.ArrowIOError("disk went away"), "/x/t.parquet")
    assert isinstance(io, OSError) and io.filename == "/x/t.parquet" and io.errno == errno.EIO


def test_a_failed_atomic_write_names_the_destination_not_its_temp_file(tmp_path):
    target = tmp_path / "report.json"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(OSError) as exc:
        storage.location(target).write_text("{}")
    assert exc.value.filename == str(target) and ".tmp" not in str(exc.value)
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # the temp file is gone
    with pytest.raises(FileNotFoundError) as exc:
        storage.location(tmp_path / "no" / "such" / "out.json").write_text("{}")
    assert exc.value.filename == str(tmp_path / "no" / "such" / "out.json")


def test_disk_full_in_an_atomic_write_names_the_destination(small_tmpfs):
    with pytest.raises(OSError) as exc:
        storage.location(small_tmpfs / "big.json").write_text("x" * (3 << 20))
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(small_tmpfs / "big.json")
    assert list(small_tmpfs.iterdir()) == []


# --------------------------------------------------------------------------- short reprs


def test_a_token_input_prints_short(tmp_path, tokenizer_file, texts):
    from datatools.io.sources.inputs import InputOptions, open_input

    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:3]))
    inp = open_input(tmp_path / "d.jsonl", InputOptions(tokenizer=tokenizer_file))
    text = repr(inp)
    assert len(text) < 400 and "d.jsonl" in text and "tokenizer.json" in text and '"model"' not in text, text
    assert '"model"' not in repr(inp.encoder) and len(repr(inp.encoder)) < 600
