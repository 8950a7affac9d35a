"""JAX training on datatools pipelines (extra ``datatools[jax]``): model, step, MFU accounting, loop."""
