"""Token ids of a token column are checked against datatools' limit (int32: 2**31 - 1) wherever a column is read,
analyze-padding included (issue 36, item 8: ids of 2**40 were accepted)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import without_progress
from datatools.cli import main


@pytest.mark.parametrize("bad", [2**40, 2**31])
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_an_id_over_the_limit_is_refused_naming_it(tmp_path, capsys, bad, kind):
    rows = [[1, 2, bad], [3, 4]]
    if kind == "jsonl":
        path = tmp_path / "ids.jsonl"
        path.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows))
    else:
        path = tmp_path / "ids.parquet"
        pq.write_table(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int64()))}), path)
    assert main(["analyze-padding", str(path), "--ctx", "8"]) == 2
    err = without_progress(capsys.readouterr().err)  # a progress line comes first when the machine is slow
    assert err.count("\n") == 1 and path.name in err and str(bad) in err, err


def test_ids_at_the_limit_are_read(tmp_path, capsys):
    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps({"input_ids": [1, 2**31 - 1]}) + "\n")
    assert main(["analyze-padding", str(path), "--ctx", "8", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["num_sequences"] == 1
