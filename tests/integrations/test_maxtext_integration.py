"""``datatools.integrations.maxtext`` without MaxText installed: MaxText's keys -> a datatools pipeline, and the
iterator contract (global jax arrays, a checkpointable Grain iterator). MaxText itself runs in ``clients/maxtext``."""

from __future__ import annotations

import re

import numpy as np
import pytest

from datatools.integrations.maxtext import HostBatchIterator, create_data_iterator, pipeline_config

KEYS = {
    "max_target_length": 64,
    "global_batch_size_to_load": 8,
    "data_shuffle_seed": 3,
    "max_segments_per_seq": -1,
    "grain_worker_count": 0,
    "num_epoch": 1,
    "enable_data_shuffling": True,
    "eval_interval": -1,
}


@pytest.fixture()
def store(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 150, 400)
    tokens = rng.integers(1, 500, int(lengths.sum())).astype(np.int32)
    d = tmp_path / "docs"
    d.mkdir()
    np.save(d / "tokens.npy", tokens)
    np.save(d / "lengths.npy", lengths)
    return d


def test_maxtext_keys_become_the_pipeline(store):
    cfg = pipeline_config(
        {**KEYS, "grain_train_files": str(store), "max_segments_per_seq": 6},
        {"shuffle": {"kind": "block", "io_block_size": 8}},
        process_index=1,
        process_count=2,
    )
    assert cfg.packing.ctx == 64 and cfg.batch_size == 8 and cfg.packing.max_segments == 6  # global, 4 per host
    assert (cfg.shard.index, cfg.shard.count, cfg.seed, cfg.workers) == (1, 2, 3, 0)
    assert cfg.format == "maxtext" and cfg.positions == "restart" and cfg.boundary_targets == "mask"
    assert cfg.shuffle.kind == "block" and cfg.shuffle.io_block_size == 8 and cfg.source.path == str(store)
    off = pipeline_config({**KEYS, "grain_train_files": str(store), "enable_data_shuffling": False})
    assert off.shuffle.kind == "none"


@pytest.mark.parametrize(
    "pipeline, match",
    [
        ({"packing": {"ctx": 128}}, "packing.ctx=128 contradicts MaxText's max_target_length=64"),
        ({"batch_size": 3}, "batch_size=3 contradicts"),
        ({"format": "hf"}, "format='hf' contradicts"),
        ({"bucketing": {"num_buckets": 2}}, "use packing, not bucketing"),
        (
            {"curriculum": {"lengths": [32, 64], "tokens_per_batch": 128, "tile": 32}},
            "one \\(batch, max_target_length\\) shape per run: a curriculum's batches of several lengths",
        ),
    ],
)
def test_contradictions_are_errors(pipeline, match):
    with pytest.raises(ValueError, match=match):
        pipeline_config({**KEYS, "grain_train_files": "data"}, pipeline)
    with pytest.raises(ValueError, match="no data"):
        pipeline_config(KEYS, {})


FLASH_TE = {**KEYS, "grain_train_files": "data", "attention": "cudnn_flash_te", "packing": True}


@pytest.mark.parametrize(
    "keys, pipeline, says",
    [
        ({"packing": False, "max_segments_per_seq": 6}, {}, "set packing=true$"),
        (
            {"packing": "false", "max_segments_per_seq": 6, "dataset_type": "synthetic"},
            {},
            "set packing=true dataset_type=grain$",
        ),
        ({}, {}, "set max_segments_per_seq=N \\(N: the most documents per row; analyze-padding --maxtext-config"),
        ({"packing": False}, {"packing": {"max_segments": 12}}, "set packing=true max_segments_per_seq=12$"),
    ],
)
def test_cudnn_flash_te_without_packing_or_a_cap_is_refused_naming_the_keys(keys, pipeline, says):
    """Issue 58: MaxText's cudnn_flash_te reads segment ids only with ``packing: true`` (and then holds at most
    ``max_segments_per_seq`` of them): anything else would attend across the documents of our packed rows."""
    with pytest.raises(ValueError, match="^MaxText attention=cudnn_flash_te would attend across the documents") as e:
        pipeline_config({**FLASH_TE, **keys}, pipeline)
    assert "\n" not in str(e.value)
    assert re.search(says, str(e.value)), str(e.value)


def test_a_cap_below_the_documents_a_row_holds_is_named():
    from datatools.analysis.maxtext_simulation import attention_keys

    assert attention_keys("cudnn_flash_te", True, "grain", 4, 8) == {"max_segments_per_seq": 8}
    assert attention_keys("cudnn_flash_te", True, "grain", 8, 8) == {}


def test_attention_that_keeps_packed_documents_apart_is_accepted():
    assert pipeline_config({**FLASH_TE, "max_segments_per_seq": 6}).packing.max_segments == 6
    for attention in ("dot_product", "flash", "autoselected"):  # these read the segment ids whatever packing says
        assert pipeline_config({**FLASH_TE, "attention": attention, "packing": False}).format == "maxtext"


def test_eval_split_needs_eval_files(store):
    with pytest.raises(ValueError, match="grain_eval_files"):
        pipeline_config({**KEYS, "grain_train_files": str(store)}, split="eval")
    ev = pipeline_config(
        {**KEYS, "grain_train_files": "x", "grain_eval_files": str(store), "global_batch_size_to_load_eval": 4},
        {"source": {"path": "y"}},
        split="eval",
    )
    assert ev.source.path == str(store) and ev.shuffle.kind == "none" and ev.batch_size == 4 and ev.num_epochs == 1


def test_iterator_gives_global_arrays_and_resumes(store):
    import jax
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    train, ev = create_data_iterator({**KEYS, "grain_train_files": str(store)}, mesh, pipeline={})
    assert ev is None
    assert isinstance(train, HostBatchIterator)  # MaxText is not installed here: datatools' own wrapper
    it = train
    first = next(it)
    assert set(first) == {
        "inputs",
        "inputs_segmentation",
        "inputs_position",
        "targets",
        "targets_segmentation",
        "targets_position",
    }
    assert first["inputs"].shape == (8, 64) and isinstance(first["inputs"], jax.Array)
    assert int(np.asarray(first["inputs_position"]).max()) < 64  # positions restart in every piece
    state = it.local_iterator.get_state()
    want = [np.asarray(next(it)["targets"]) for _ in range(3)]
    again, _ = create_data_iterator({**KEYS, "grain_train_files": str(store)}, mesh, pipeline={})
    again.local_iterator.set_state(state)
    for w in want:
        np.testing.assert_array_equal(np.asarray(next(again)["targets"]), w)


def test_fewer_hosts_restore_views_continue_one_sequence(store):
    """``expansion_factor_real_data`` = 1/k (MaxText's key for a restart on fewer hosts): k views of one pipeline
    iterator, which MaxText restores from the k saved files (all the same global state) and reads in turn; read in
    turn they give the one global sequence, from the restored position on."""
    import jax
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    keys = {**KEYS, "grain_train_files": str(store)}
    plain, _ = create_data_iterator(keys, mesh, pipeline={})
    next(plain)
    state = plain.local_iterator.get_state()
    want = [np.asarray(next(plain)["targets"]) for _ in range(5)]
    # MaxText loads expansion x the global batch then (its steps take one saved host's share): 4 of the 8 rows
    views, _ = create_data_iterator(
        {**keys, "global_batch_size_to_load": 4, "expansion_factor_real_data": 0.5}, mesh, pipeline={}
    )
    assert isinstance(views, list) and len(views) == 2 and views[0].local_iterator is views[1].local_iterator
    for view in views:  # as MaxText's restore: each view from its saved host's file, the same state
        view.local_iterator.set_state(state)
    for step, w in enumerate(want):
        np.testing.assert_array_equal(np.asarray(next(views[step % 2])["targets"]), w)
    assert views[0].local_iterator.get_state() == plain.local_iterator.get_state()
    with pytest.raises(ValueError, match="expansion_factor_real_data=0.3 below 1 must be 1/k"):
        create_data_iterator({**keys, "expansion_factor_real_data": 0.3}, mesh, pipeline={})
    with pytest.raises(TypeError, match="expansion_factor_real_data must be a number"):
        pipeline_config({**keys, "expansion_factor_real_data": "half"})
    assert pipeline_config({**keys, "expansion_factor_real_data": 2.0}).batch_size == 8  # more hosts: unchanged


def test_the_launcher_without_maxtext_says_so_in_one_line(tmp_path):
    """Issue 35: ``python -m datatools.integrations.maxtext`` without MaxText printed a ModuleNotFoundError
    traceback. Now: one line naming the interpreter and a command that installs it, exit 1 (the environment);
    a config file that does not exist is the input's fault, exit 2."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("maxtext") is not None:
        pytest.skip("MaxText is installed here (the client suite runs the launcher for real)")
    base = tmp_path / "base.yml"
    base.write_text("steps: 3\n")
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("source: {path: data/}\npacking: {ctx: 64}\nbatch_size: 2\n")
    for args, status, says in (
        (["--pipeline", str(pipeline), str(base), "steps=3"], 1, "MaxText is not installed in "),
        ([str(base)], 1, "pip install 'maxtext[tpu]==0.2.5' (TPU) or 'maxtext[cuda12]==0.2.5' (NVIDIA GPU)"),
        ([str(base)], 1, "MaxText 0.2.5 needs Python 3.12: in a Python 3.12 venv, pip install"),
        ([str(tmp_path / "missing.yml")], 2, "MaxText config file not found"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "datatools.integrations.maxtext", *args], capture_output=True, text=True, timeout=120
        )
        err = proc.stderr.strip()
        assert proc.returncode == status and "\n" not in err and says in err, proc.stderr
        assert "Traceback" not in err


def test_the_trainers_page_script_without_maxtext_names_the_install(tmp_path):
    """Issue 58 (rerun): the page's ``train_maxtext.py`` (``maxtext.train(...)``) in a venv without MaxText ended in
    ``ModuleNotFoundError: No module named 'maxtext'``; it now raises the launcher's line (the Python, the extras)."""
    import importlib.util

    from datatools.base.errors import MissingPackage
    from datatools.integrations import maxtext

    if importlib.util.find_spec("maxtext") is not None:
        pytest.skip("MaxText is installed here (the client suite runs the page's script for real)")
    base = tmp_path / "base.yml"
    base.write_text("steps: 3\n")
    with pytest.raises(MissingPackage, match=r"MaxText is not installed in .*maxtext\[cuda12\]==0\.2\.5") as info:
        maxtext.train([str(base), "steps=3"], pipeline=None)
    assert info.value.name == "maxtext"


def test_maxtexts_grain_worker_count_is_workers_except_for_a_token_store(store, tmp_path):
    """MaxText's ``base.yml`` sets ``grain_worker_count: 1``: a token store (read by one reader per host, which
    refuses worker processes) still builds and gives batches; a source tokenized or decoded as it is read gets the
    workers asked for."""
    from conftest import random_docs, write_test_store
    from datatools.pipeline import build

    keys = {**KEYS, "grain_worker_count": 1}
    assert pipeline_config({**keys, "grain_train_files": str(store)}).workers == 1  # NumPy files: worker processes
    tokens = write_test_store(tmp_path / "store", random_docs(300, seed=1, max_len=100), vocab_size=1000)
    cfg = pipeline_config({**keys, "grain_train_files": str(tokens)})
    assert cfg.workers == 0
    batch = next(iter(build(cfg)))
    assert batch["inputs"].shape == (8, 64)
