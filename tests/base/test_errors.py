"""Exit statuses by exception type (base/errors.py), and the command line's one line for each."""

from __future__ import annotations

import errno

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import without_progress
from datatools.base.errors import (
    BAD_INPUT_ERRNOS,
    DeviceOutOfMemory,
    RunFailed,
    StorageError,
    UnsupportedVersion,
    exit_status,
)
from datatools.io import storage

CASES = [
    (ValueError("x.yaml: packing.ctx must be >= 1; got 0"), 2, "x.yaml: packing.ctx must be >= 1; got 0"),
    (TypeError("ctx must be an integer, got 'a'"), 2, "ctx must be an integer, got 'a'"),
    (OverflowError("too big"), 2, "too big"),
    (RecursionError("maximum recursion depth exceeded"), 2, "input nested too deeply"),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "/data/x"), 2, "/data/x: No such file"),
    (PermissionError(errno.EACCES, "Permission denied", "/data/x"), 1, "/data/x: Permission denied"),
    (OSError(errno.ENOSPC, "No space left on device", "/out"), 1, "/out: No space left on device"),
    (StorageError(errno.ECONNREFUSED, "endpoint unreachable", "s3://b/k"), 1, "s3://b/k: endpoint unreachable"),
    (RunFailed("step 3: the loss became nan; training stopped"), 1, "step 3: the loss became nan"),
    (UnsupportedVersion("Grain 9.0: unknown key"), 1, "Grain 9.0: unknown key"),
    (DeviceOutOfMemory("out of memory on the device (4 GiB); a smaller batch_size"), 1, "out of memory on the device"),
    (MemoryError(), 1, "out of memory (a smaller --ctx"),
    (KeyError("boom"), 1, "internal error (KeyError): 'boom' (please report it)"),
    (RuntimeError("RESOURCE_EXHAUSTED: not an XLA error"), 1, "internal error (RuntimeError)"),
]


@pytest.mark.parametrize("exc, status, line", CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_the_command_line_maps_each_type_to_its_status_and_one_line(exc, status, line, monkeypatch, capsys):
    from datatools.cli import cli, main

    def fail(*_, **__):
        raise exc

    monkeypatch.setattr(cli, "main", fail)
    assert exit_status(exc) == status
    assert main(["--help"]) == status
    err = capsys.readouterr().err
    assert err.startswith("datatools: error: ") and line in err and err.count("\n") == 1, err


@given(code=st.sampled_from(sorted(errno.errorcode)))
def test_an_os_error_is_bad_input_exactly_when_its_errno_names_a_wrong_path(code):
    assert exit_status(OSError(code, "x")) == (2 if code in BAD_INPUT_ERRNOS else 1)


def test_the_types_are_what_callers_already_catch():
    assert issubclass(StorageError, OSError)
    assert issubclass(DeviceOutOfMemory, MemoryError) and storage.StorageError is StorageError
    assert exit_status(KeyboardInterrupt()) == 130


def test_click_usage_errors_stay_status_2(capsys):
    from datatools.cli import main

    assert main(["pack", "--no-such-option"]) == 2
    assert isinstance(click.UsageError("x"), click.ClickException)
    assert capsys.readouterr().err.startswith("datatools: error: ")


@pytest.mark.parametrize("denied, status", [(True, 1), (False, 0)])
def test_a_path_option_refused_for_its_permissions_is_status_1_by_type(tmp_path, monkeypatch, capsys, denied, status):
    """click's check of an existing path that the user may not read: PathAccessError (exit 1, the environment);
    tests run as root, who may read anything, so the permission is denied through os.access."""
    import os

    from datatools.cli import main
    from datatools.cli.common import AccessCheckedPath, PathAccessError

    config = tmp_path / "train.yaml"
    config.write_text("x: 1\n")
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: not (denied and str(p) == str(config)) and real(p, mode))
    path = AccessCheckedPath(dir_okay=False)
    if denied:
        with pytest.raises(PathAccessError, match="is not readable"):
            path.convert(str(config), None, None)
        with pytest.raises(click.BadParameter) as not_access:  # a directory where a file is wanted: bad input
            path.convert(str(tmp_path), None, None)
        assert not isinstance(not_access.value, PathAccessError)
    assert main(["analyze-padding", str(tmp_path / "none"), "--maxtext-config", str(config)]) == (1 if denied else 2)
    err = without_progress(capsys.readouterr().err)  # a slow start may print a progress line first
    assert err.startswith("datatools: error: ") and err.count("\n") == 1
    assert ("is not readable" in err) == denied
