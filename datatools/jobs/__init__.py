"""Jobs: work that writes data sets, resumable and atomic (pretokenize, the demo data, packed plans)."""
