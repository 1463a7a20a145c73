"""The documentation stays true to the code: the generated reference pages are current, the
README is short and every link in it and in the site's pages leads somewhere."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GENERATOR = ROOT / "scripts" / "docs-reference.py"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def local_links(page: Path) -> list[str]:
    """Relative link targets of a Markdown page (no URLs, no in-page anchors)."""
    found = LINK.findall(page.read_text())
    return [t.split("#")[0] for t in found if not re.match(r"[a-z]+:|#", t) and t.split("#")[0]]


def test_the_reference_pages_match_the_code() -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_stale_reference_page_is_caught(tmp_path: Path) -> None:
    for page in (DOCS / "reference").glob("*.md"):
        (tmp_path / page.name).write_text(page.read_text())
    stale = tmp_path / "settings.md"
    stale.write_text(stale.read_text().replace("| `mode` |", "| `moded` |"))
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert str(stale) in result.stdout
    assert "cli.md" not in result.stdout


def test_the_readme_is_a_page_or_two_and_its_links_resolve() -> None:
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= 200
    missing = [t for t in local_links(readme) if not (ROOT / t).exists()]
    assert missing == []


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_link_of_a_site_page_resolves(page: Path) -> None:
    missing = [t for t in local_links(page) if not (page.parent / t).resolve().exists()]
    assert missing == []


def test_every_page_is_in_the_site_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(entries: object) -> list[str]:
        if isinstance(entries, str):
            return [entries]
        if isinstance(entries, dict):
            return [p for value in entries.values() for p in pages(value)]
        if isinstance(entries, list):
            return [p for entry in entries for p in pages(entry)]
        return []

    listed = set(pages(config["nav"]))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert on_disk - listed == set()
    assert listed - on_disk == set()
