"""NumPy directories: token ids outside [0, 2**31 - 1] and a lengths.npy that disagrees with offsets.npy are refused
naming the file(s), by the library and by analyze-padding, like every other format (issue 21 defect 6)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datatools.cli import main
from datatools.io import open_documents, open_input, read_lengths
from datatools.io.formats.numpy_files import numpy_dir


def numpy_input(d, tokens, lengths=None, offsets=None):
    d.mkdir(parents=True, exist_ok=True)
    np.save(d / "tokens.npy", tokens)
    if lengths is not None:
        np.save(d / "lengths.npy", np.asarray(lengths, np.int64))
    if offsets is not None:
        np.save(d / "offsets.npy", np.asarray(offsets, np.int64))
    return d


@pytest.mark.parametrize("bad", [-1, -(2**40), 2**31, 2**40])
@pytest.mark.parametrize("index", ["lengths", "offsets"])
def test_an_id_outside_the_int32_range_is_refused_by_every_reader(tmp_path, capsys, bad, index):
    tokens = np.arange(1, 11, dtype=np.int64)
    tokens[7] = bad
    d = numpy_input(tmp_path / "np", tokens, **({"lengths": [4, 6]} if index == "lengths" else {"offsets": [0, 4, 10]}))
    for read in (lambda: read_lengths(open_input(d)), lambda: open_documents(open_input(d)), lambda: numpy_dir(d)):
        with pytest.raises(ValueError, match=str(bad)) as err:
            read()
        assert "tokens.npy" in str(err.value)
    assert main(["analyze-padding", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tokens.npy" in err and str(bad) in err, err


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(0, 20), min_size=1, max_size=10), data=st.data())
def test_lengths_and_offsets_that_disagree_are_refused_naming_both(tmp_path, lengths, data):
    """Property: with both files present, the input is read iff offsets == [0, *cumsum(lengths)]."""
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    other = data.draw(st.lists(st.integers(0, 20), min_size=1, max_size=10))
    tokens = np.ones(int(offsets[-1]), np.int32)
    d = numpy_input(tmp_path / f"np{len(list(tmp_path.iterdir()))}", tokens, lengths=other, offsets=offsets)
    if other == list(lengths):
        assert read_lengths(open_input(d)).tolist() == list(lengths)
        return
    with pytest.raises(ValueError) as err:
        read_lengths(open_input(d))
    assert "lengths.npy" in str(err.value) and "offsets.npy" in str(err.value)


def test_the_cli_refuses_disagreeing_lengths_and_offsets(tmp_path, capsys):
    d = numpy_input(tmp_path / "np", np.ones(10, np.int32), lengths=[4, 6], offsets=[0, 5, 10])
    assert main(["analyze-padding", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lengths.npy" in err and "offsets.npy" in err, err
