"""The formats floor of io: one module per stored or input format (token store, Levanter cache, tables,
JSON lines, NumPy, ArrayRecord, tokenizers); imports only from :mod:`datatools.io.storage`."""
