"""The input layer: every supported input streamed with bounded memory, tokenized as asked, read on demand.

Floors (docs/architecture.md): storage (:mod:`~datatools.io.storage`, :mod:`~datatools.io.atomic`,
:mod:`~datatools.io.paths`), the formats (:mod:`~datatools.io.formats` and one module per format), and
:mod:`~datatools.io.inputs`: any input resolved once, lengths streamed, documents on demand.
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
