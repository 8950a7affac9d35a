"""The MaxText shim's mechanics, on a stand-in module (MaxText lives in its own venv, `make test-clients`): the
function is replaced inside the block and put back after it (an exception included), and a module whose function
is missing or takes other parameters is an UnsupportedVersion error naming it, before anything is replaced."""

from __future__ import annotations

import sys
import types

import pytest

from datatools.base.errors import UnsupportedVersion
from datatools.integrations import maxtext_shim
from datatools.integrations.maxtext_shim import MAXTEXT_FACTORY, swapped_function


@pytest.fixture()
def fake_maxtext(monkeypatch):
    """A module at MaxText's path with its create_data_iterator(config, mesh)."""
    name, attr, _ = MAXTEXT_FACTORY
    module = types.ModuleType(name)

    def create_data_iterator(config, mesh):
        return ("maxtext", config, mesh)

    setattr(module, attr, create_data_iterator)
    for parent in ("maxtext", "maxtext.input_pipeline"):
        monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    monkeypatch.setitem(sys.modules, name, module)
    return module


def test_the_swap_lasts_for_the_block_and_the_original_comes_back(fake_maxtext):
    original = fake_maxtext.create_data_iterator
    with maxtext_shim.maxtext_data_iterator(lambda config, mesh: ("datatools", config, mesh)) as kept:
        assert fake_maxtext.create_data_iterator("c", "m") == ("datatools", "c", "m")
        assert kept is original and kept("c", "m") == ("maxtext", "c", "m")
    assert fake_maxtext.create_data_iterator is original
    with pytest.raises(RuntimeError, match="trainer failed"):
        with maxtext_shim.maxtext_data_iterator(lambda config, mesh: None):
            raise RuntimeError("trainer failed")
    assert fake_maxtext.create_data_iterator is original


def test_use_datatools_goes_through_the_shim(fake_maxtext, monkeypatch):
    from datatools.integrations import maxtext

    monkeypatch.setattr(maxtext, "create_data_iterator", lambda config, mesh, pipeline=None: ("dt", pipeline))
    original = fake_maxtext.create_data_iterator
    with maxtext.use_datatools("p.yaml"):
        assert fake_maxtext.create_data_iterator({}, None) == ("dt", "p.yaml")
    assert fake_maxtext.create_data_iterator is original


def test_another_maxtext_is_refused_naming_what_differs(fake_maxtext):
    name, attr, params = MAXTEXT_FACTORY

    def three(config, mesh, process_indices):
        return None

    setattr(fake_maxtext, attr, three)
    with pytest.raises(UnsupportedVersion, match=r"takes \(config, mesh, process_indices\), not \(config, mesh\)"):
        with swapped_function(name, attr, lambda config, mesh: None, params):
            pass
    assert getattr(fake_maxtext, attr) is three  # nothing replaced
    delattr(fake_maxtext, attr)
    with pytest.raises(UnsupportedVersion, match=f"has no function {attr}"):
        with swapped_function(name, attr, lambda config, mesh: None, params):
            pass
