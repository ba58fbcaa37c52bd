"""Fixtures and hooks shared by every test package."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the Playwright tests last.

    pytest-playwright's sync API keeps an asyncio loop running in the main thread from its first
    test to the end of the session (its `playwright` fixture is session-scoped), and pytest-asyncio
    cannot start a loop of its own inside it. Every async test therefore runs before the browser.
    """
    items.sort(key=lambda item: item.nodeid.startswith("tests/e2e/"))
