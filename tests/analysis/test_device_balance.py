"""The analyzer's device view: the busiest device's attention work over the mean, drawn and balanced."""

from __future__ import annotations

import json

import numpy as np
import pytest

from datatools.analysis.device_balance import device_balance
from datatools.cli import main

LENGTHS = np.random.default_rng(3).lognormal(np.log(400), 1.18, 40_000).round().clip(1, 8192).astype(np.int64)


def test_balanced_rows_bring_the_busiest_device_to_the_mean():
    view = device_balance(LENGTHS, 8192, batch_size=128, devices=[4, 16, 128], block=128)
    by = {e.devices: e for e in view.entries}
    assert by[16].drawn_mean > 1.3 and by[16].balanced_p90 <= 1.05
    assert by[4].balanced_mean <= 1.01
    assert by[128].balanced_mean == by[128].drawn_mean == by[128].bound_mean  # one row a device: nothing to move
    for e in view.entries:
        assert e.bound_mean <= e.balanced_mean <= e.drawn_mean
    assert "128 devices (1 row(s) each)" in view.note


def test_devices_must_divide_the_global_batch():
    with pytest.raises(ValueError, match="devices=3 does not divide the global batch of 128 rows"):
        device_balance(LENGTHS, 8192, batch_size=128, devices=[3])


def test_cli_reports_the_device_view(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "lengths.npy", LENGTHS)
    args = ["analyze-padding", str(tmp_path / "d"), "--ctx", "8192", "--devices", "16", "--global-batch", "64"]
    assert main([*args, "--json", "-"]) == 0
    view = json.loads(capsys.readouterr().out)["devices"]
    assert view["batch_size"] == 64 and view["entries"][0]["devices"] == 16
    assert view["entries"][0]["balanced_mean"] < view["entries"][0]["drawn_mean"]
    assert main([*args[:-1], "40"]) == 2
    assert "devices=16 does not divide the global batch of 40 rows" in capsys.readouterr().err
