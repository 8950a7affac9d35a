"""One recommendation per trainer: with a segment cap, MaxText's packer is first_fit everywhere it is printed."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datatools.analysis.maxtext_simulation import maxtext_report, read_maxtext_config
from datatools.analysis.padding import PaddingOptions, analyze


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(1, 3000), min_size=20, max_size=400),
    st.sampled_from([256, 1024, 2048]),
    st.one_of(st.none(), st.integers(1, 16)),
    st.sampled_from(["autoselected", "cudnn_flash_te", "flash"]),
)
def test_a_capped_recommendation_is_first_fit_in_every_maxtext_setting(lengths, ctx, cap, attention):
    lengths = np.asarray(lengths, np.int64)
    rec = analyze(lengths, PaddingOptions(contexts=(ctx,), max_segments=cap)).recommendation
    mt = maxtext_report(
        lengths,
        read_maxtext_config(None, [f"max_target_length={ctx}", f"attention={attention}"]),
        datatools_cap=rec.max_segments,
        datatools_efficiency=rec.efficiency,
        config="t",
    )
    own = mt.advice.maxtext_settings
    if rec.max_segments is not None:
        assert rec.maxtext.get("grain_packing_type", "first_fit") == "first_fit" or not rec.maxtext["packing"]
        if rec.maxtext.get("packing"):
            assert rec.maxtext["max_segments_per_seq"] == rec.max_segments
        assert own["grain_packing_type"] == "first_fit"
        assert own["max_segments_per_seq"] > 0
    if own["grain_packing_type"] == "best_fit":  # no cap anywhere
        assert rec.max_segments is None and "max_segments_per_seq" not in own
    printed = [rec.maxtext, own]
    for s in printed:  # never a cap beside a packer that ignores it
        if s.get("max_segments_per_seq") not in (None, -1):
            assert s["grain_packing_type"] == "first_fit"
