"""``datatools pack``: JSON figures, re-packing a plan from its lengths, one-line errors."""

from __future__ import annotations

import json

import numpy as np

from datatools.cli import main
from datatools.io.formats.plan_file import PlanFile
from datatools.kernels.packing import pack_lengths


def test_pack_json_and_repack(tmp_path, capsys):
    lengths = np.maximum(1, np.random.default_rng(2).lognormal(5.0, 1.0, 3000)).astype(np.uint32)
    (tmp_path / "lens").mkdir()
    np.save(tmp_path / "lens" / "lengths.npy", lengths)
    assert main(["pack", str(tmp_path / "lens"), str(tmp_path / "a"), "--ctx", "1024", "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    whole = pack_lengths(lengths, 1024)
    assert report["num_rows"] == whole.num_rows and report["efficiency"] == whole.efficiency
    assert report["lower_bound_rows"] >= whole.lower_bound_rows and report["input_kind"] == "lengths"
    # Re-packed from the plan's own lengths: another ctx and algorithm, no token read.
    assert (
        main(
            [
                "pack",
                str(tmp_path / "a"),
                str(tmp_path / "b"),
                "--ctx",
                "256",
                "--algorithm",
                "next_fit",
                "--max-segments",
                "4",
                "--json",
                "-",
            ]
        )
        == 0
    )
    again = json.loads(capsys.readouterr().out)
    ref = pack_lengths(lengths, 256, algorithm="next_fit", max_segments=4)
    assert (again["num_rows"], again["input_kind"], again["ctx"]) == (ref.num_rows, "plan", 256)
    assert again["data"] == report["data"]
    np.testing.assert_array_equal(PlanFile(tmp_path / "b").to_plan().doc, ref.doc)


def test_pack_errors_are_one_line(tmp_path, capsys):
    np.save(tmp_path / "lengths.npy", np.array([5, 6]))
    assert main(["pack", str(tmp_path), str(tmp_path / "p"), "--ctx", "8"]) == 0
    capsys.readouterr()
    assert main(["pack", str(tmp_path), str(tmp_path / "p"), "--ctx", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("datatools: error: ") and "already exists" in err and err.count("\n") == 1
    assert main(["pack", str(tmp_path / "missing"), str(tmp_path / "q"), "--ctx", "8"]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["pack", str(tmp_path), str(tmp_path / "q"), "--ctx", "8", "--align", "3"]) == 2
    assert not (tmp_path / "q").exists()
