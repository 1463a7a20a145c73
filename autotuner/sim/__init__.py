"""A simulated vLLM engine that serves `/metrics` in vLLM's exact format (demo and tests)."""
