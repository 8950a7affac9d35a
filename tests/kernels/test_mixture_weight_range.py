"""Mixture weights are normalised without overflow or underflow: weights near 1e308 (whose sum is inf) or near
5e-324 mix as their ratios say (issue 36, item 8: mix-report showed weight 0.0 for weights near 1e308)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from datatools.analysis.mixing import mixing_stats
from datatools.kernels.mixture import split_ratios


@pytest.mark.parametrize("scale", [1e308, 1.7e308, 1.0, 1e-300, 5e-324])
def test_equal_weights_of_any_magnitude_split_evenly(scale):
    np.testing.assert_allclose(split_ratios([scale, scale, scale]), [1 / 3, 1 / 2, 1.0])
    stats = mixing_stats(np.ones((2, 3), np.int64), np.ones((2, 3), np.int64), [scale] * 3, ["a", "b", "c"])
    np.testing.assert_allclose([s.weight for s in stats], [1 / 3] * 3)


@given(
    ratios=st.lists(st.floats(0.01, 100), min_size=2, max_size=5),
    scale=st.sampled_from([1e300, 1e-300, 1.0]),
)
def test_ratios_do_not_depend_on_the_scale(ratios, scale):
    w = np.array(ratios)
    np.testing.assert_allclose(split_ratios(w * scale), split_ratios(w), rtol=1e-9)
