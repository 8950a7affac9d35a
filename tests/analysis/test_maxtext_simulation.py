"""What a MaxText pipeline wastes (read from its own config), and advice that never pairs best_fit with a cap.

The same figures against MaxText's own pipeline are checked in ``clients/maxtext`` (``make test-clients``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.analysis.maxtext_simulation import MaxTextSettings, maxtext_report, maxtext_view, read_maxtext_config
from datatools.analysis.padding import PaddingOptions, analyze
from datatools.kernels.packing import pack_lengths

lengths_st = st.lists(st.integers(1, 3000), min_size=1, max_size=300)


def test_reads_a_config_its_base_chain_and_overrides(tmp_path):
    (tmp_path / "base.yml").write_text(
        "max_target_length: 2048\nper_device_batch_size: 12.0\npacking: true\n"
        "grain_packing_type: 'first_fit'\nmax_segments_per_seq: -1\n"
        "unrelated_key: [1, 2]\n"
    )
    (tmp_path / "run.yml").write_text("base_config: base.yml\nmax_target_length: 1024\n")
    s = read_maxtext_config(
        tmp_path / "run.yml",
        ["per_device_batch_size=2", "devices_per_host=4", "max_segments_per_seq=8", "packing=True"],
    )
    assert (s.max_target_length, s.per_host_batch, s.segment_cap, s.packing) == (1024, 8, 8, True)
    assert read_maxtext_config(None).per_host_batch == 12  # MaxText's defaults, one device
    best = read_maxtext_config(None, ["grain_packing_type=best_fit", "max_segments_per_seq=4"])
    assert best.segment_cap is None  # MaxText passes the cap to first fit only


@pytest.mark.parametrize(
    "bad, match",
    [
        (["grain_packing_type=best"], "grain_packing_type must be one of"),
        (["max_target_length=0"], r"max_target_length must be in \[1, 16,777,216\]"),
        (["max_target_length=2e9"], r"max_target_length must be in"),
        (["per_device_batch_size=nan"], "per_device_batch_size must be > 0"),
        (["per_device_batch_size=4096", "devices_per_host=4096"], "per-host batch"),
        (["max_target_length=x"], "max_target_length must be an int"),
        (["per_device_batch_size=-1"], "per_device_batch_size must be > 0"),
        (["packing"], "key=value"),
        (["packing=maybe"], "packing must be a bool"),
    ],
)
def test_bad_settings_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        read_maxtext_config(None, bad)


def test_a_base_config_loop_is_an_error(tmp_path):
    (tmp_path / "a.yml").write_text("base_config: b.yml\n")
    (tmp_path / "b.yml").write_text("base_config: a.yml\n")
    with pytest.raises(ValueError, match="loops"):
        read_maxtext_config(tmp_path / "a.yml")


@settings(max_examples=40, deadline=None)
@given(
    lengths=lengths_st,
    ctx=st.sampled_from([256, 512, 1024]),
    bins=st.integers(1, 16),
    cap=st.integers(1, 8),
    kind=st.sampled_from(["first_fit", "best_fit", "concat_then_split"]),
    packing=st.booleans(),
    tokenize=st.booleans(),
    truncate=st.booleans(),
)
def test_view_conserves_tokens_and_respects_the_cap(lengths, ctx, bins, cap, kind, packing, tokenize, truncate):
    s = MaxTextSettings(
        max_target_length=ctx,
        per_device_batch_size=bins,
        grain_packing_type=kind,
        packing=packing,
        max_segments_per_seq=cap,
        tokenize_train_data=tokenize,
        use_truncation=truncate,
        add_bos=False,
        add_eos=False,
        enable_data_shuffling=False,
    )
    v = maxtext_view(np.asarray(lengths), s)
    lengths = np.asarray(lengths)
    chunked = tokenize and not truncate
    kept = lengths.sum() if chunked else np.minimum(lengths, ctx).sum()
    assert v.dropped_tokens == lengths.sum() - kept
    assert v.rows % bins == 0 and v.rows * ctx >= kept
    assert v.efficiency == pytest.approx(kept / (v.rows * ctx))
    assert v.fails == (int((lengths > ctx).sum()) if packing and not tokenize else 0)
    if packing and kind == "first_fit":
        assert v.segment_cap == cap and v.max_docs_per_row <= cap
    if packing and kind == "best_fit":
        assert v.segment_cap is None
    if not packing:
        pieces = sum(-(-n // ctx) for n in lengths) if chunked else len(lengths)
        assert v.rows == -(-pieces // bins) * bins


def test_view_first_fit_matches_the_planned_model_with_one_bin():
    """One open row, no cap: Grain's first fit is next fit, which the planned packer computes too."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 500, 2000)
    s = MaxTextSettings(
        max_target_length=512, per_device_batch_size=1, tokenize_train_data=False, enable_data_shuffling=False
    )
    assert maxtext_view(lengths, s).rows == pack_lengths(lengths, 512, algorithm="next_fit").num_rows


@settings(max_examples=25, deadline=None)
@given(
    lengths=lengths_st,
    attention=st.sampled_from(["dot_product", "flash", "cudnn_flash_te"]),
    cap=st.sampled_from([-1, 4, 16]),
    kind=st.sampled_from(["first_fit", "best_fit"]),
)
def test_advice_never_pairs_best_fit_with_a_cap(lengths, attention, cap, kind):
    report = analyze(np.asarray(lengths), PaddingOptions(contexts=(1024,), threads=1))
    rec = report.recommendation
    if rec.maxtext.get("max_segments_per_seq") is not None:
        assert rec.maxtext["grain_packing_type"] == "first_fit"
    s = read_maxtext_config(
        None,
        [
            f"attention={attention}",
            f"max_segments_per_seq={cap}",
            f"grain_packing_type={kind}",
            "max_target_length=1024",
            "per_device_batch_size=8",
        ],
    )
    mt = maxtext_report(
        np.asarray(lengths), s, datatools_cap=rec.max_segments, datatools_efficiency=rec.efficiency, config="test"
    )
    own = mt.advice.maxtext_settings
    if "max_segments_per_seq" in own or attention == "cudnn_flash_te" or cap > 0:
        assert own["grain_packing_type"] == "first_fit" and own.get("max_segments_per_seq")
    else:
        assert own == {"packing": True, "grain_packing_type": "best_fit"}
    assert any("packing: true" in n for n in mt.advice.notes)
    assert mt.per_host_batch == 8 and mt.today.bins == 8


def test_pretokenized_long_documents_are_reported():
    s = MaxTextSettings(max_target_length=128, tokenize_train_data=False, per_device_batch_size=4)
    rec = analyze(np.array([50, 300, 90, 129]), PaddingOptions(contexts=(128,), threads=1)).recommendation
    lengths = np.array([50, 300, 90, 129])
    mt = maxtext_report(lengths, s, datatools_cap=rec.max_segments, datatools_efficiency=rec.efficiency, config="test")
    assert mt.today.fails == 2
    assert any("2 pre-tokenized documents are longer than max_target_length=128" in n for n in mt.advice.notes)


def test_tokenized_text_gets_bos_and_eos():
    base = MaxTextSettings(
        max_target_length=64, tokenize_train_data=True, use_truncation=True, enable_data_shuffling=False
    )
    without = dataclasses.replace(base, add_bos=False, add_eos=False)
    assert maxtext_view([63, 10], base).dropped_tokens == 1  # 63 + 2 > 64
    assert maxtext_view([63, 10], without).dropped_tokens == 0


def test_shuffled_order_is_a_permutation_of_one_hosts_share():
    from datatools.analysis.maxtext_simulation import _order  # noqa: PLC2701 (the module's own helper, tested here)

    lengths = np.arange(1, 1001)
    shuffled = _order(lengths, MaxTextSettings(enable_data_shuffling=True, data_shuffle_seed=5))
    assert not np.array_equal(shuffled, lengths) and np.array_equal(np.sort(shuffled), lengths)
    share = _order(lengths, MaxTextSettings(enable_data_shuffling=False, process_count=4))
    assert share.shape[0] == 250
    sorted_lengths = np.sort(np.random.default_rng(0).integers(1, 500, 5000))
    on = MaxTextSettings(max_target_length=512, per_device_batch_size=8, tokenize_train_data=False)
    off = dataclasses.replace(on, enable_data_shuffling=False)
    assert maxtext_view(sorted_lengths, on).rows < maxtext_view(sorted_lengths, off).rows


def test_the_plot_has_maxtext_today_beside_the_strategies(tmp_path, monkeypatch):
    """Issue 58: --plot drew the strategies but not what the MaxText config wastes today; with a MaxText config it
    has "MaxText today" (the pipeline as configured) and MaxText as advised, at max_target_length."""
    import matplotlib.pyplot as plt

    from datatools.analysis.padding_input import AnalysisOptions, analyze_input
    from datatools.analysis.padding_report import plot

    (tmp_path / "docs").mkdir()
    np.save(tmp_path / "docs" / "lengths.npy", np.random.default_rng(0).integers(1, 900, 400))
    (tmp_path / "base.yml").write_text("max_target_length: 1024\npacking: false\nper_device_batch_size: 4\n")
    drawn = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (drawn.append(fig), real_close(fig)))
    for config in (None, tmp_path / "base.yml"):
        report = analyze_input(str(tmp_path / "docs"), AnalysisOptions(contexts=[512], maxtext_config=config))
        plot(report, tmp_path / "p.png", source="docs")
        labels = [t.get_text() for t in drawn[-1].axes[1].get_xticklabels()]
        heights = [round(b.get_height(), 6) for b in drawn[-1].axes[1].patches]
        if config is None:
            assert not any("MaxText" in label for label in labels)
            continue
        assert labels[-2:] == ["MaxText today\n(as configured)", "MaxText as advised\n(packing settings)"]
        today = report.maxtext.today
        assert today.packing is False and round(today.efficiency * 100, 6) in heights  # its bar, drawn
