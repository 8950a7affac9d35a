"""The token store in object storage: written and read through tensorstore's s3 / gcs drivers, byte-identical
to the same store on local disk, checked on open and by ``verify`` the same way."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import random_docs, store_document, store_documents, write_test_store
from datatools.io import storage
from datatools.io.formats.store import TokenStore, read_manifest
from datatools.io.formats.store_verify import verify_store
from object_storage import object_bytes


@pytest.mark.parametrize("bucket", ["s3_bucket", "gcs_bucket"])
def test_store_written_to_object_storage_is_byte_identical_to_local(bucket, request, tmp_path):
    url = request.getfixturevalue(bucket) + "/stores/a"
    docs = random_docs(300, seed=3)
    write_test_store(tmp_path / "local", docs)
    write_test_store(url, docs)
    local, remote = object_bytes(tmp_path / "local"), object_bytes(url)
    assert sorted(local) == sorted(remote) and "manifest.json" in remote
    for key in local:
        assert local[key] == remote[key], key
    store = TokenStore(url)
    assert store.path == url and len(store) == len(docs)
    for i in (0, 7, 299):
        np.testing.assert_array_equal(store_document(store, i), docs[i])
    flat, off = store_documents(store, 10, 20)
    np.testing.assert_array_equal(flat, np.concatenate(docs[10:20]))
    assert verify_store(url).documents == len(docs)


@pytest.mark.parametrize("bucket", ["s3_bucket", "gcs_bucket"])
def test_remote_store_with_a_missing_chunk_is_refused_naming_it(bucket, request):
    url = request.getfixturevalue(bucket) + "/s"
    write_test_store(url, random_docs(50, seed=1))
    fs, inner = storage.location(url).filesystem()
    fs.rm_file(f"{inner}/tokens/c/0")
    with pytest.raises(ValueError, match=r"tokens/c/0 is missing"):
        TokenStore(url)


def test_remote_store_refuses_a_prefix_that_holds_objects(s3_bucket):
    url = s3_bucket + "/busy"
    storage.location(url + "/precious.txt").write_text("keep me")
    with pytest.raises(ValueError, match="already holds objects"):
        write_test_store(url, random_docs(5))
    assert storage.location(url + "/precious.txt").read_bytes() == b"keep me"
    with pytest.raises(ValueError, match="not a datatools token store"):
        read_manifest(url)


def test_a_bucket_root_store_is_written_beside_only_its_own_staging(s3_bucket):
    """At a bucket root the job stages under ``.partial/`` (object_store_commit): those keys do not stop the
    write and are left as they are; any other key does, and so does ``.partial/`` under a prefix."""
    storage.location(f"{s3_bucket}/.partial/job.json").write_text("{}")
    docs = random_docs(20, seed=2)
    write_test_store(s3_bucket, docs)
    assert len(TokenStore(s3_bucket)) == len(docs)
    assert storage.location(f"{s3_bucket}/.partial/job.json").read_bytes() == b"{}"
    storage.location(f"{s3_bucket}/p/.partial/job.json").write_text("{}")
    with pytest.raises(ValueError, match=r"already holds objects \(s3://.*/p/\.partial/job\.json\)"):
        write_test_store(f"{s3_bucket}/p", docs)


def test_opening_a_store_in_a_bucket_asks_no_objects_size(slow_s3):
    """In a bucket every request is a round trip before the first batch: the token store's probe is the read of
    its manifest itself, not a request for its size and then one for its bytes. Counted at the proxy: no HEAD
    while the store opens (one, of ``manifest.json``, before)."""
    from datatools.io.sources.inputs import open_input

    url, proxy = f"{slow_s3.url}/in", slow_s3.proxy
    write_test_store(url, random_docs(40, seed=2))
    storage.location(url).filesystem()[0].invalidate_cache()  # s3fs kept what the write listed
    proxy.reset_stats()
    assert open_input(url).format == "store"
    assert proxy.stats().count("HEAD") == 0, proxy.stats().methods
