"""Analysis: what a dataset wastes under every padding strategy (and what to change), how much a shuffle mixes.

* :mod:`~datatools.analysis.padding`: strategy simulations (numba), statistics, the recommendation
* :mod:`~datatools.analysis.padding_report`: the one renderer of its report (every view's tables) and its PNG plot
* :mod:`~datatools.analysis.shuffle_quality`: groups per batch and reads per batch of no, full and block shuffles
"""
