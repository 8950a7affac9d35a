"""Pipelines: a validated YAML config (:mod:`~datatools.pipeline.config`) -> a Grain dataset of batches
(:mod:`~datatools.pipeline.build`, over the schedule of its mode: :mod:`~datatools.pipeline.schedules`), and
running one to measure it (:mod:`~datatools.pipeline.run`).
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
