"""Trainers fed by datatools pipelines, configured with the trainer's own keys: MaxText
(:mod:`~datatools.integrations.maxtext`) and Levanter (:mod:`~datatools.integrations.levanter`). Hugging Face /
TRL need no adapter: the ``hf`` batch format is what their models take.
"""
