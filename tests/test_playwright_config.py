"""The browser's launch flags (playwright.config.py) keep Playwright's own: Chromium takes only the
last --disable-features, so ours must carry every feature the pinned Playwright driver disables."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import playwright

from server.config import ROOT


def _config() -> object:
    spec = importlib.util.spec_from_file_location("playwright_config", ROOT / "playwright.config.py")
    assert spec is not None and spec.loader is not None
    config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(config)
    return config


def test_our_disabled_features_carry_playwrights_own_and_the_heap_profiler() -> None:
    bundle = (Path(playwright.__file__).parent / "driver" / "package" / "lib" / "coreBundle.js").read_text()
    block = re.search(r"disabledFeatures = \[(.*?)\]", bundle, re.S)
    assert block is not None, "Playwright's list of disabled features was not found in its driver"
    theirs = re.findall(r'^\s*"(\w+)"', block.group(1), re.M)
    assert theirs, "Playwright's list of disabled features was not read"
    config = _config()
    args = config.LAUNCH_ARGS["args"]  # type: ignore[attr-defined]
    [switch] = [arg for arg in args if arg.startswith("--disable-features=")]
    ours = switch.removeprefix("--disable-features=").split(",")
    assert set(theirs) <= set(ours), sorted(set(theirs) - set(ours))
    assert "HeapProfilerReporting" in ours
