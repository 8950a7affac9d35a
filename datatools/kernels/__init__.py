"""Kernels: numpy/numba in and out, no Grain, no JAX, no I/O.

* :mod:`~datatools.kernels.packing`: plans, row counts, materialize, pack_in_groups, the on-disk plan encoding
* :mod:`~datatools.kernels.bucket`: optimal tile-aligned bucket boundaries, token-budget batches
* :mod:`~datatools.kernels.shuffle`: FeistelPermutation (any n), BlockShuffle (windowed, per epoch, O(1) access)
* :mod:`~datatools.kernels.tiles`: tile_align, choose_context, fit_resolution, chunk
* :mod:`~datatools.kernels.batch_layouts`: the canonical batch as MaxText, Levanter, Hugging Face batches
* :mod:`~datatools.kernels.warm`: numba's start-up in a thread, while a process waits on I/O
"""
