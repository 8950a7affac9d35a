"""Pipelines: a validated YAML config -> a Grain dataset of batches, and running one to measure it.

* :mod:`~datatools.pipeline.schema`: typed, validated config dataclasses (the machinery)
* :mod:`~datatools.pipeline.build`: the pipeline config and building its Grain dataset
* :mod:`~datatools.pipeline.run`: running a pipeline for N batches and measuring it
"""

from datatools.pipeline.build import (PipelineConfig, ShardConfig, SourceConfig, build, build_canonical, load_config,
                                      open_source, parse_config)

__all__ = ["PipelineConfig", "ShardConfig", "SourceConfig", "build", "build_canonical", "load_config",
           "open_source", "parse_config"]
