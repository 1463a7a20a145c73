"""Where the shared fixtures live: ../shared/fixtures beside the repository (read-only)."""

from __future__ import annotations

from pathlib import Path

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
FIXTURES = SHARED / "fixtures"
CONFIGS = FIXTURES / "configs"  # models' config.json files as their publishers ship them
