"""Browser launch settings shared by every Playwright test (tests/e2e/conftest.py uses them).

Debian's chromium, never a downloaded browser. As root Playwright adds --no-sandbox itself
(chromium_sandbox defaults to False). The other flags keep headless Chromium quiet on a closed
network: no background connections, component updates or sync to hosts it cannot reach.
"""

CHROMIUM = "/usr/bin/chromium"

LAUNCH_ARGS: dict[str, object] = {
    "executable_path": CHROMIUM,
    "headless": True,
    "args": [
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--metrics-recording-only",
    ],
}
