"""Adapters that turn vLLM metrics (a direct scrape or a Prometheus server) into Observations."""
