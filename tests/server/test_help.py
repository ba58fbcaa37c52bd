"""Help pages: README.md's sections served as HTML (server/help.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from quart.typing import TestClientProtocol as Client

from server.config import ROOT
from server.help import HOME_NETWORK, help_page, readme_section


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'chat.db'}"


async def test_the_home_network_section_of_the_readme_is_served(client: Client) -> None:
    response = await client.get("/help/home-network")
    assert response.status_code == 200
    page = (await response.get_data()).decode()
    assert "<h2>Serving on your home network (HTTPS)</h2>" in page
    assert "subjectAltName" in page and "--certfile" in page and "Caddyfile" in page
    assert "<h2>Assistants</h2>" not in page  # the next section is not part of it
    assert page.startswith("<!doctype html>") and '<a href="/">' in page


def test_the_section_runs_to_the_next_heading_and_raw_html_stays_text(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Title\n\n## Before\n\nno\n\n## Serving on your home network (HTTPS)\n\n"
        "Run it.\n\n### A subsection\n\n<script>alert(1)</script> and <b>bold</b>\n\n## After\n\nno\n"
    )
    section = readme_section(readme.read_text(), HOME_NETWORK)
    assert section is not None and section.startswith("## Serving") and "A subsection" in section
    assert "## After" not in section
    page = help_page(HOME_NETWORK, readme)
    assert "<h3>A subsection</h3>" in page and "<p>Run it.</p>" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>" not in page and "no</p>" not in page


def test_without_the_readme_the_page_says_where_the_guide_is(tmp_path: Path) -> None:
    page = help_page(HOME_NETWORK, tmp_path / "README.md")
    assert "README.md" in page and HOME_NETWORK in page
    assert readme_section("# Nothing here\n", HOME_NETWORK) is None


def test_the_readme_has_the_section() -> None:
    assert readme_section((ROOT / "README.md").read_text(), HOME_NETWORK) is not None
