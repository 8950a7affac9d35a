"""Every store error names a command that really repairs (issue 36, item 1): for each of the 8 kinds of damage, in a
local directory and in S3, the error a reader gives (``datatools verify``) ends with ``repair: datatools pretokenize
... --overwrite``, built from the job the manifest records; running that very command rebuilds the store
byte-identical, and the reader then passes. Before, the errors named ``pretokenize`` reruns that printed "already
complete" and changed nothing, or ``datatools verify``, which repairs nothing."""

from __future__ import annotations

import json
import shlex

import pytest
from test_pretokenize_repair import DAMAGE

from datatools.cli import main
from datatools.io import storage
from object_storage import object_bytes

CORRUPT_MANIFEST = "manifest.json no longer JSON"


def _corrupt_manifest(store, _key):
    storage.location(store).join("manifest.json").write_bytes(b'{"format": "datatools-token-store", "vers')


KINDS = {**{k: v[:2] for k, v in DAMAGE.items()}, CORRUPT_MANIFEST: (_corrupt_manifest, None)}


@pytest.fixture
def job(tmp_path, texts, tokenizer_file):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:12]))
    return path, tokenizer_file


def _repair_named(err: str, job) -> list[str]:
    """The command after ``repair:`` in the error line, as arguments of ``datatools``; the placeholders of a
    store whose manifest no longer reads (no record of its job) filled with the job's input and tokenizer."""
    line = [x for x in err.splitlines() if x.startswith("datatools: error:")][-1]
    assert "; repair: datatools pretokenize " in line, line
    command = line.split("; repair: ", 1)[1].split(" (the job that wrote it)")[0]
    command = command.replace("INPUTS...", shlex.quote(str(job[0]))).replace("TOKENIZER", shlex.quote(str(job[1])))
    args = shlex.split(command)
    assert args[:2] == ["datatools", "pretokenize"] and args[-1] == "--overwrite", args
    return args[1:]


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_command_a_store_error_names_repairs_it(job, tmp_path, request, where, kind, capsys):
    out = str(tmp_path / "store") if where == "local" else f"{request.getfixturevalue('s3_bucket')}/store"
    assert main(["pretokenize", str(job[0]), out, "--tokenizer", str(job[1])]) == 0
    intact = object_bytes(out)
    harm, key = KINDS[kind]
    harm(out, key)
    capsys.readouterr()
    assert main(["verify", out]) == 2
    err = capsys.readouterr().err
    args = _repair_named(err, job)
    if kind != CORRUPT_MANIFEST:  # the manifest reads: the command is the recorded job's, placeholders none
        assert str(job[0]) in args and str(job[1]) in args
    assert main(args) == 0
    assert object_bytes(out) == intact
    assert main(["verify", out]) == 0
