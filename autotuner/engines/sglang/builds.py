"""SGLang's capability table (builds.yaml, package data) and the build in force: the settings'
declared version, the image tag, `GET /server_info`'s version, else the table's default."""

from __future__ import annotations

from autotuner.core.engine.builds import Origin
from autotuner.engines.build_table import BuildTable

TABLE = BuildTable(
    package="autotuner.engines.sglang",
    label="SGLang",
    reported_by=Origin.SERVER_INFO,
    example="0.5.23",
)
