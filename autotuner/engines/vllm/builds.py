"""vLLM's capability table (builds.yaml, package data) and the build in force chosen from what
is known of the running engine: the settings' declared version, the image tag, `GET /version`,
else the table's default version (engines/build_table.py does the choosing)."""

from __future__ import annotations

from autotuner.core.engine.builds import Origin
from autotuner.engines.build_table import BuildTable

TABLE = BuildTable(
    package="autotuner.engines.vllm",
    label="vLLM",
    reported_by=Origin.VERSION_ENDPOINT,
    example="0.33.0, 0.32, 0.32.0-cpu",
)
