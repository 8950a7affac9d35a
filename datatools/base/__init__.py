"""Base: what every layer shares (limits and argument checks, errors, progress, report tables), and nothing else."""
