"""Each batch's per-token loss weights, computed in the loader (host CPU, Grain), next to the batch they weigh."""

from __future__ import annotations

import numpy as np

import grain
from datatools.base.checks import check_choice
from datatools.kernels.loss_weights import LOSS_WEIGHTINGS, add_loss_weights


class LossWeights(grain.transforms.Map):  # type: ignore[misc]  # Grain ships no type information: its classes are Any
    """Add ``loss_weights`` (float32, (rows, ctx)) and ``loss_weight_sum`` (float32, (rows,)) to a canonical batch
    (:mod:`datatools.kernels.loss_weights`), from its own rows only; ``weighting``: ``token`` or ``document``."""

    def __init__(self, weighting: str):
        self.weighting = check_choice(weighting, "loss_weighting", LOSS_WEIGHTINGS)

    def map(self, element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return add_loss_weights(element, self.weighting)
