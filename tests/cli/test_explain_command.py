"""``datatools explain``: its JSON is the API's report; a document's sightings and a ledger file; bad input is one
line and exit status 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from datatools.cli import main
from datatools.pipeline import load_config
from datatools.pipeline.explain import Explainer


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    root = tmp_path_factory.mktemp("explain")
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 300, 400)
    (root / "docs").mkdir()
    np.save(root / "docs" / "tokens.npy", rng.integers(0, 1000, int(lengths.sum())).astype(np.int32))
    np.save(root / "docs" / "lengths.npy", lengths)
    path = root / "c.yaml"
    path.write_text(
        f"source: {{path: {root / 'docs'}}}\nshuffle: {{kind: full}}\n"
        "packing: {mode: streaming, ctx: 512, window: 64}\nbatch_size: 8\ndrop_remainder: false\nnum_epochs: 2\n"
        "shard: {index: 0, count: 2}\n"
    )
    return path


def test_step_json_is_the_api_report(config, tmp_path, capsys):
    assert main(["explain", str(config), "--step", "7", "--devices", "2", "--json", str(tmp_path / "s.json")]) == 0
    printed = capsys.readouterr().out
    assert "step 7 (epoch 0, batch 7)" in printed and "2 host(s) x 2 device(s)" in printed
    api = Explainer(load_config(str(config)), devices=2).step(7)
    assert json.loads((tmp_path / "s.json").read_text()) == api.as_dict()
    assert [r.device for r in api.rows] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert main(["explain", str(config), "--steps", "2:5", "--json", "-"]) == 0
    assert [s["step"] for s in json.loads(capsys.readouterr().out)["steps"]] == [2, 3, 4]


def test_document_and_ledger(config, tmp_path, capsys):
    assert main(["explain", str(config), "--document", "11", "--epochs", "2", "--json", "-"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [s["epoch"] for s in found["sightings"]] == [0, 1]
    first = found["sightings"][0]
    row = Explainer(load_config(str(config))).step(first["step"]).rows[first["row"]]
    assert 11 in row.document
    assert main(["explain", str(config), "--ledger", str(tmp_path / "l.npz"), "--upto", "1000000"]) == 0
    with np.load(tmp_path / "l.npz") as f:
        assert f["visits"].tolist() == [2] * 400  # two whole epochs
        assert f["partial"].size == 0  # every document delivered whole: its tokens are visits x length


@pytest.mark.parametrize(
    "args, message",
    [
        (["--step", "100000"], "step 100000 is past the run's end"),
        ([], "give one of --step/--steps, --document, --ledger"),
        (["--ledger", "x.npz"], "--ledger needs --upto"),
        (["--step", "1", "--hosts", "two"], "--hosts 'two': expected COUNT or COUNT@FIRST_STEP"),
        (["--step", "1", "--hosts", "3"], "does not divide over 3 hosts"),
        (["--step", "1", "--devices", "3"], "do not divide over 3 devices"),
        (["--steps", "5:2"], "expected 0 <= A < B"),
        (["--document", "400"], "document 400 is out of range"),
    ],
)
def test_bad_input_is_one_line_exit_2(config, args, message, capsys):
    assert main(["explain", str(config), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1], err


def test_a_state_without_a_mixture_history_is_refused(config, tmp_path, capsys):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"portable": {"elements_read": 3}, "pipeline": {"seed": 0}}))
    assert main(["explain", str(config), "--step", "1", "--state", str(state)]) == 2
    assert "not a saved pipeline state with a mixture's weights" in capsys.readouterr().err
