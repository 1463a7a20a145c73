"""vLLM: its flag spellings, its args read and written, its metric names and what its builds
accept."""
