"""Analysis: what a dataset wastes under every padding strategy (and what to change), how much a shuffle mixes,
how close batches come to a mixture's weights, what a curriculum saves."""
