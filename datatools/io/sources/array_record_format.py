"""ArrayRecord files (MaxText's ``grain_train_files``: a file, a glob, a comma list; local names) as an input format
(its row of :data:`~datatools.io.sources.format_table.FORMATS`): a table of ``tf.train.Example`` records, one
``array_record`` shard per file, kept in the table format's :class:`~datatools.io.sources.table_format.TableInput`
and read as the table format reads its shards (no lengths cache); the feature and the tokenizer checked on the
first file."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from datatools.io import storage
from datatools.io.formats import array_record_files
from datatools.io.formats.discover import Shard
from datatools.io.formats.token_input import InputOptions, TokenInput
from datatools.io.sources import table_format
from datatools.io.sources.documents import DocumentSource
from datatools.io.sources.table_format import TableInput
from datatools.io.storage.paths import display


def detect(loc: storage.Location, opts: InputOptions) -> TokenInput | None:
    if not (loc.has_directories and array_record_files.detect(loc.path)):
        return None
    files = array_record_files.expand(loc.path)
    col, is_text = array_record_files.detect_feature(files[0], opts.column)
    shards = tuple(Shard("array_record", (str(f),), nbytes=f.stat().st_size) for f in files)
    table = table_format.tokenized(TableInput(col, is_text, shards), opts, display(files[0]), "feature")
    return TokenInput(loc.path, "table", "array_record", nbytes=sum(s.nbytes for s in shards), opened=table)


def lengths(inp: TokenInput) -> Iterator[tuple[int, np.ndarray, int]]:
    return table_format.table_pieces(inp, TableInput.shard_length_pieces, cached=False)


def documents(inp: TokenInput, progress: Callable[[int, int], None] | None) -> DocumentSource:
    return table_format.documents(inp, progress, cached=False)
