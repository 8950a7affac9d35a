"""The input layer: every supported input streamed with bounded memory, tokenized as asked, read on demand.

Floors (docs/architecture.md): storage (:mod:`~datatools.io.storage`, :mod:`~datatools.io.storage.atomic`,
:mod:`~datatools.io.storage.paths`), the formats (:mod:`~datatools.io.sources.format_table` and one module per format),
and :mod:`~datatools.io.sources.inputs`: any input resolved once, lengths streamed, documents on demand.
"""

from datatools.io.formats.store import TokenStore, is_token_store, read_manifest, token_dtype, write_store
from datatools.io.formats.tokenizer import TextEncoder, load_tokenizer, open_encoder
from datatools.io.sources.documents import (
    ArrayDocuments,
    ChunkedDocuments,
    DocumentSource,
    StoreDocuments,
    as_document_source,
)
from datatools.io.sources.inputs import (
    InputOptions,
    TokenInput,
    open_documents,
    open_input,
    read_lengths,
    read_lengths_by_shard,
)

__all__ = [
    "ArrayDocuments",
    "ChunkedDocuments",
    "DocumentSource",
    "InputOptions",
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
