"""Pipelines: a validated YAML config -> a Grain dataset of batches, and running one to measure it.

* :mod:`~datatools.pipeline.schema`: the validation machinery (typed dataclasses, every problem named at once)
* :mod:`~datatools.pipeline.config`: the pipeline config (sections, keys, limits) and reading it from YAML
* :mod:`~datatools.pipeline.sources`: opening a config's documents (one source, or a mixture's)
* :mod:`~datatools.pipeline.schedules`: the config's global batch sequence, its mode's schedule from one table
* :mod:`~datatools.pipeline.build`: building a config's Grain dataset
* :mod:`~datatools.pipeline.run`: running a pipeline for N batches and measuring it
"""

from datatools.pipeline.build import build, build_canonical
from datatools.pipeline.config import PipelineConfig, ShardConfig, SourceConfig, load_config, parse_config
from datatools.pipeline.sources import open_source

__all__ = [
    "PipelineConfig",
    "ShardConfig",
    "SourceConfig",
    "build",
    "build_canonical",
    "load_config",
    "open_source",
    "parse_config",
]
