"""The length-reading bar counts one unit: bytes as stored. Issue 58: on a compressed Parquet file it counted the
decoded bytes of each row group against the file's size, and passed 100%."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console

from datatools.io.sources.inputs import open_input, read_lengths
from datatools.io.sources.lengths_progress import read_lengths_shown


def test_the_length_bar_ends_at_its_total_on_compressed_parquet(tmp_path, monkeypatch):
    docs = [[7, 8, 9] * (50 + i % 20) for i in range(200)]  # repetitive ids: zstd shrinks them many times over
    pq.write_table(pa.table({"input_ids": docs}), tmp_path / "t.parquet", compression="zstd", row_group_size=40)
    inp = open_input(tmp_path / "t.parquet")
    assert pq.ParquetFile(tmp_path / "t.parquet").metadata.num_row_groups == 5
    done: list[int] = []
    lengths = read_lengths(inp, progress=lambda shards, nbytes: done.append(nbytes))
    assert len(done) == 5 and done == sorted(done)
    meta = pq.ParquetFile(tmp_path / "t.parquet").metadata
    decoded = sum(meta.row_group(i).total_byte_size for i in range(5))
    assert decoded > inp.nbytes  # what the bar counted before: past its total
    assert 0 < done[-1] <= inp.nbytes  # the row groups as stored: the file less its footer

    from datatools.io.sources import lengths_progress

    advanced: list[int] = []
    real = lengths_progress.count_progress

    def counted(console, total, what, **kwargs):  # the bar's total, and every step it is advanced by
        advanced.append(total)
        bar = real(console, total, what, **kwargs)

        class Recording:
            def __enter__(self):
                advance = bar.__enter__()
                return lambda n=1: (advanced.append(n), advance(n))

            def __exit__(self, *exc):
                return bar.__exit__(*exc)

        return Recording()

    monkeypatch.setattr(lengths_progress, "count_progress", counted)
    shown = read_lengths_shown(inp, Console(file=io.StringIO()))
    assert (shown == lengths).all()
    total, steps = advanced[0], advanced[1:]
    assert total == inp.nbytes and sum(steps) == total and min(steps) >= 0  # ends at 100%, never past it
