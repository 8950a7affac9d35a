"""Kernels: numpy/numba in and out, no Grain, no JAX, no I/O.

* :mod:`~datatools.kernels.pack`: pack_lengths -> PackPlan, materialize (segment ids, positions, loss mask)
* :mod:`~datatools.kernels.bucket`: optimal tile-aligned bucket boundaries, token-budget batches
* :mod:`~datatools.kernels.shuffle`: FeistelPermutation (any n), BlockShuffle (windowed, per epoch, O(1) access)
* :mod:`~datatools.kernels.tiles`: tile_align, choose_context, fit_resolution, chunk
* :mod:`~datatools.kernels.batch_layouts`: the canonical batch as MaxText, Levanter, Hugging Face batches
"""
