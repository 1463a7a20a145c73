"""The fault suite's record of each fault: what the sidecar did and how long until it was free
again, appended as JSON lines to $AUTOTUNER_FAULT_TABLE when set (docs/faults.md's table)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest

Record = Callable[[str, str, float], None]


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Record:
    def write(fault: str, did: str, recovered_s: float) -> None:
        path = os.environ.get("AUTOTUNER_FAULT_TABLE")
        if not path:
            return
        row = {"test": request.node.name, "fault": fault, "did": did, "s": round(recovered_s, 2)}
        with open(path, "a", encoding="utf-8") as table:
            table.write(json.dumps(row) + "\n")

    return write
