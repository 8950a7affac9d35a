"""The config schema: typed choices, every problem reported at once, short quotes of bad values, the reference."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from datatools.pipeline import parse_config


def test_every_problem_at_once_with_short_quotes():
    with pytest.raises(ValueError) as err:
        parse_config(
            {
                "source": {"path": "x"},
                "shuffle": {"kind": "blok"},
                "packing": {"ctx": 0, "algorithm": "nope"},
                "batch_size": "x" * 10_000,
                "bogus": 1,
            }
        )
    msg = str(err.value)
    for part in (
        "unknown key 'bogus' at the top level",
        "shuffle.kind must be one of 'none', 'full', 'block'; got 'blok'",
        "packing.ctx must be >= 1; got 0",
        "packing.algorithm must be one of",
        "batch_size must be an integer",
    ):
        assert part in msg
    assert len(msg) < 1000 and "\n" not in msg


def test_a_retired_key_is_refused_saying_what_replaced_it():
    """``read_block`` did nothing since every batch's pieces are read in one call: it is refused in one line."""
    with pytest.raises(ValueError) as err:
        parse_config({"source": {"path": "x"}, "packing": {"ctx": 8}, "read_block": 32})
    msg = str(err.value)
    assert msg == "config: read_block was removed: every batch's pieces are read in one call; delete the key", msg


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "full "])
def test_literals_and_numbers_are_strict(value):
    with pytest.raises(ValueError):
        parse_config({"source": {"path": "x"}, "packing": {"ctx": 8}, "shuffle": {"kind": value}})


def test_non_finite_floats_are_refused():
    from datatools.pipeline.schema import from_dict
    from datatools.train.loop import TrainSection

    with pytest.raises(ValueError, match="train.learning_rate must be a finite number; got nan"):
        from_dict(TrainSection, {"learning_rate": float("nan")}, "train")


def test_the_key_reference_is_generated_from_the_schema():
    script = Path(__file__).resolve().parents[2] / "scripts" / "config_reference.py"
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_config_names_its_mode_the_same_everywhere():
    """``PipelineConfig.mode``: what the pipeline report and the mix report call how rows are made (the mix report
    called a curriculum "bucketing")."""
    base = {"source": {"path": "x"}, "batch_size": 8}
    for section, want in [
        ({"packing": {"ctx": 64}}, "planned"),
        ({"packing": {"ctx": 64, "mode": "streaming"}}, "streaming"),
        ({"bucketing": {"boundaries": [32, 64]}}, "bucketing"),
        ({"curriculum": {"lengths": [128, 256], "tokens_per_batch": 1024}}, "curriculum"),
    ]:
        assert parse_config({**base, **section}).mode == want, section
