"""SGLang's capability table (builds.yaml, package data) and the build in force: the settings'
declared version, the image tag, `GET /server_info`'s version, else the table's default."""

from __future__ import annotations

from autotuner.core.engine.builds import BuildInForce, Origin
from autotuner.engines.build_table import AUTO, BuildTable

TABLE = BuildTable(
    package="autotuner.engines.sglang",
    label="SGLang",
    reported_by=Origin.SERVER_INFO,
    example="0.5.23",
)


def build_in_force(
    declared: str = AUTO, *, image: str | None = None, reported: str | None = None
) -> BuildInForce:
    """The SGLang build the engine runs (reported: `GET /server_info`'s "version")."""
    return TABLE.build_in_force(declared, image=image, reported=reported)
