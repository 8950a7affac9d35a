"""Configs read safely: an alias bomb is refused by its expanded size before anything is constructed (counted, not
timed), duplicate keys are refused.

Regression tests of issue 21 defect 4: 72 aliases in 600 bytes (9 levels of 9) stayed under the alias cap and ran
past 60 s; a key written twice silently kept its last value.
"""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import without_progress
from datatools.cli import main
from datatools.io.formats import yaml_files
from datatools.io.formats.yaml_files import MAX_EXPANDED_NODES, load_yaml


@pytest.fixture
def constructed(monkeypatch) -> list[int]:
    """One entry per document the config loader turns into Python objects: a refused bomb must add none (it is
    measured on the parsed node graph, whose aliases are shared, never expanded)."""
    calls: list[int] = []
    construct = yaml_files._LimitedLoader.construct_document

    def counted(self, node):
        calls.append(1)
        return construct(self, node)

    monkeypatch.setattr(yaml_files._LimitedLoader, "construct_document", counted)
    return calls


def bomb(levels: int, width: int, prefix: str = "") -> str:
    """``levels`` anchored lists, each holding ``width`` aliases of the one before: width**levels scalars."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return prefix + "\n".join(lines) + "\n"


def expanded_nodes(data) -> int:
    """Nodes of the loaded structure counted the slow way (every alias expanded)."""
    if isinstance(data, dict):
        return 1 + sum(expanded_nodes(k) + expanded_nodes(v) for k, v in data.items())
    if isinstance(data, list):
        return 1 + sum(expanded_nodes(v) for v in data)
    return 1


@pytest.mark.parametrize("levels, width", [(9, 9), (8, 8), (7, 7), (30, 2)])
def test_an_alias_bomb_under_the_old_alias_cap_is_refused_unexpanded(tmp_path, levels, width, constructed):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(levels, width))
    assert path.read_text().count("*") < 100 and path.stat().st_size < 1000  # under the alias cap of old
    with pytest.raises(ValueError, match="bomb.yaml") as err:
        load_yaml(path)
    assert constructed == []  # refused from the node graph: nothing built, so nothing expanded
    assert "expand" in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_a_bomb_under_a_valid_key_unexpanded(tmp_path, capsys, constructed):
    path = tmp_path / "bomb.yaml"
    anchors = bomb(9, 9).replace("\nl", "\n  l")  # under one key, then used by a key the schema reads
    path.write_text(f"x:\n  {anchors}source: {{path: STORE}}\nbucketing: {{boundaries: *l8}}\n")
    assert main(["pipeline", str(path), "--steps", "1"]) == 2
    assert constructed == []  # no part of it built, the schema's keys included
    err = without_progress(capsys.readouterr().err)
    assert err.count("\n") == 1 and "bomb.yaml" in err and "expand" in err, err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(levels=st.integers(1, 12), width=st.integers(1, 12))
def test_a_config_loads_exactly_when_its_expanded_size_fits(tmp_path, levels, width, constructed):
    """Property: refused iff the expanded node count is over the cap, and then before anything is built."""
    path = tmp_path / "c.yaml"
    path.write_text(bomb(levels, width))
    per_level = [1 + width]  # level 0: a list of width scalars; level i: a list of width copies of level i - 1
    for _ in range(1, levels):
        per_level.append(1 + width * per_level[-1])
    size = 1 + sum(1 + n for n in per_level)  # the top mapping, and each level's key and list
    built = len(constructed)
    try:
        data = load_yaml(path)
    except ValueError as exc:
        assert "expand" in str(exc) and size > MAX_EXPANDED_NODES
        assert len(constructed) == built  # nothing built
    else:
        assert size <= MAX_EXPANDED_NODES and expanded_nodes(data) == size
        assert len(constructed) == built + 1


def test_a_recursive_alias_is_refused(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("a: &a [1, *a]\n")
    with pytest.raises(ValueError, match="r.yaml"):
        load_yaml(path)


def test_anchors_and_merge_keys_still_work(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("base: &base {ctx: 512, seed: 1}\nrun:\n  <<: *base\n  seed: 2\nagain: *base\n")
    assert load_yaml(path) == {
        "base": {"ctx": 512, "seed": 1},
        "run": {"ctx": 512, "seed": 2},
        "again": {"ctx": 512, "seed": 1},
    }


@pytest.mark.parametrize(
    "text, key",
    [
        ("source: {path: a}\nbatch_size: 8\nbatch_size: 16\n", "batch_size"),
        ("source: {path: a}\npacking: {ctx: 512, ctx: 1024}\n", "ctx"),
        ("a:\n  - {x: 1}\n  - {y: 1, y: 2}\n", "y"),
        ("1: a\n0x1: b\n", "1"),
    ],
)
def test_a_duplicate_key_is_refused_naming_the_key_and_the_file(tmp_path, text, key):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match="dup.yaml") as err:
        load_yaml(path)
    assert "duplicate key" in str(err.value) and repr(yaml.safe_load(f"{key}: 0").popitem()[0]) in str(err.value)
    assert "\n" not in str(err.value)


def test_the_cli_refuses_a_duplicate_key(tmp_path, capsys):
    path = tmp_path / "dup.yaml"
    path.write_text("source: {path: a}\npacking: {ctx: 512}\nbatch_size: 8\nbatch_size: 16\n")
    assert main(["pipeline", str(path), "--steps", "1"]) == 2
    err = without_progress(capsys.readouterr().err)
    assert err.count("\n") == 1 and "dup.yaml" in err and "'batch_size'" in err and "duplicate" in err, err
