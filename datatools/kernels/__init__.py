"""Kernels: numpy/numba in and out, no Grain, no JAX, no I/O (packing, bucketing, shuffles, batch formats)."""
