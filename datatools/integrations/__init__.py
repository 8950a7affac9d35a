"""Trainers fed by datatools pipelines, configured with the trainer's own keys.

* :mod:`~datatools.integrations.maxtext`: MaxText's ``create_data_iterator(config, mesh)`` over a datatools
  pipeline, and a way to run MaxText's trainer with it.

Hugging Face / TRL and Levanter need no adapter: the ``hf`` and ``levanter`` batch formats
(:mod:`datatools.kernels.batch_layouts`) are what their models take (see the README).
"""
