"""The input layer: every supported input streamed with bounded memory, tokenized as asked, read on demand.

One module per job:

* :mod:`~datatools.io.paths`: paths as users type them (``..``, symlinks, non-UTF-8
  names) and printable names for messages;
* :mod:`~datatools.io.atomic`: atomic writes with umask permissions;
* :mod:`~datatools.io.discover`: input files under a path, cut into shards;
* :mod:`~datatools.io.jsonl`: streaming JSON Lines (lines of any length);
* :mod:`~datatools.io.tables`: a column of a Parquet / Arrow / JSON Lines shard, batch by batch;
* :mod:`~datatools.io.numpy_files`: NumPy directories and flat token files;
* :mod:`~datatools.io.tokenizer`: tokenizer files without their truncation/padding surprises;
* :mod:`~datatools.io.store`: the token store (tensorstore, zarr v3);
* :mod:`~datatools.io.documents`: document sources (in memory, store, chunked tables);
* :mod:`~datatools.io.inputs`: any input resolved once: lengths streamed, documents on demand.
"""

from datatools.io.documents import ArrayDocuments, ChunkedDocuments, DocumentSource, StoreDocuments, as_document_source
from datatools.io.inputs import TokenInput, open_documents, open_input, read_lengths, read_lengths_by_shard
from datatools.io.store import TokenStore, is_token_store, read_manifest, token_dtype, write_store
from datatools.io.tokenizer import TextEncoder, load_tokenizer, open_encoder

__all__ = [
    "ArrayDocuments",
    "ChunkedDocuments",
    "DocumentSource",
    "StoreDocuments",
    "TextEncoder",
    "TokenInput",
    "TokenStore",
    "as_document_source",
    "is_token_store",
    "load_tokenizer",
    "open_documents",
    "open_encoder",
    "open_input",
    "read_lengths",
    "read_lengths_by_shard",
    "read_manifest",
    "token_dtype",
    "write_store",
]
