"""Input discovery under a directory: each real directory and file read once, links outside the root said aloud.

Regression tests of issue 21 defect 3: ``ln -s . d/self`` in a directory of 25 documents made analyze-padding
count 1,025 documents (the walk followed links with no cycle check), and a link to ``..`` read files outside
the directory given.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datatools.cli import main
from datatools.io.formats.discover import LinkWarning, list_input_files


def write_docs(d: Path, count: int, name: str = "a.jsonl") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    f = d / name
    f.write_text("".join(json.dumps({"input_ids": list(range(1, 2 + i % 7))}) + "\n" for i in range(count)))
    return f


def listed(path) -> list[Path]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = [f for _, f in list_input_files(path)]
    listed.warnings = [str(w.message) for w in caught if issubclass(w.category, LinkWarning)]
    return files


def real_files(files) -> set[tuple[int, int]]:
    return {(os.stat(f).st_dev, os.stat(f).st_ino) for f in files}


def test_a_link_to_the_directory_itself_reads_each_file_once(tmp_path, capsys):
    d = tmp_path / "d"
    write_docs(d, 25)
    os.symlink(".", d / "self")
    files = listed(d)
    assert files == [d / "a.jsonl"]
    assert any("self" in w for w in listed.warnings)  # the skipped link is said
    assert main(["analyze-padding", str(d), "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["num_sequences"] == 25


def test_a_link_to_the_parent_reads_nothing_outside_the_root_and_says_so(tmp_path):
    outside = write_docs(tmp_path, 3, "outside.jsonl")
    d = tmp_path / "d"
    write_docs(d, 5)
    os.symlink("..", d / "up")
    files = listed(d)
    assert files == [d / "a.jsonl"]
    assert outside not in files and not any("outside" in str(f) for f in files)
    assert len(listed.warnings) == 1 and "up" in listed.warnings[0] and "outside" in listed.warnings[0]


def test_a_link_to_a_directory_inside_the_root_is_read_once(tmp_path):
    d = tmp_path / "d"
    write_docs(d / "sub", 4)
    os.symlink("sub", d / "alias")  # the same directory twice
    os.symlink("../sub/a.jsonl", d / "sub" / "again.jsonl")  # the same file twice
    files = listed(d)
    assert len(files) == 1 and len(real_files(files)) == 1


def test_a_file_link_leading_outside_is_read_and_said(tmp_path):
    """A link to one file (the Hugging Face hub cache is made of them) is read; the warning names it."""
    blob = write_docs(tmp_path / "blobs", 3, "blob.jsonl")
    d = tmp_path / "d"
    d.mkdir()
    os.symlink(blob, d / "train.jsonl")
    files = listed(d)
    assert files == [d / "train.jsonl"]
    assert len(listed.warnings) == 1 and "train.jsonl" in listed.warnings[0]


def test_the_cli_shows_the_warning_in_one_line(tmp_path, capsys):
    d = tmp_path / "d"
    write_docs(d, 5)
    os.symlink("..", d / "up")
    assert main(["analyze-padding", str(d), "--json", str(tmp_path / "r.json")]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "up" in line and "outside" in line]
    assert len(lines) == 1 and lines[0].startswith("datatools: warning: "), err
    assert "Traceback" not in err and "warnings.warn" not in err


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    links=st.lists(
        st.tuples(st.sampled_from(["", "x", "x/y", "z"]), st.sampled_from([".", "..", "../..", "x", "/"])), max_size=6
    )
)
def test_any_links_read_every_real_file_once_and_nothing_outside(tmp_path_factory, links):
    """Property: whatever directory links are added, the files listed are exactly the real files under the root,
    each once."""
    base = tmp_path_factory.mktemp("links")
    d = base / "root"
    write_docs(base, 1, "outside.jsonl")
    for sub in ("", "x", "x/y", "z"):
        write_docs(d / sub, 2, f"f{len(sub)}.jsonl")
    expected = real_files(p for p in d.rglob("*.jsonl") if not any(q.is_symlink() for q in [p, *p.parents]))
    for k, (where, target) in enumerate(links):
        link = d / where / f"link{k}"
        if not link.exists() and not link.is_symlink():
            os.symlink(target, link)
    files = listed(d)
    assert len(files) == len(real_files(files))  # no file twice
    assert real_files(files) == expected  # every real file under the root, nothing outside it


def test_an_unreadable_directory_still_raises_its_permission_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every directory")
    d = tmp_path / "d"
    write_docs(d / "sub", 2)
    (d / "sub").chmod(0)
    try:
        with pytest.raises(PermissionError):
            list_input_files(d)
    finally:
        (d / "sub").chmod(0o755)
