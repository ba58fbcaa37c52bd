"""The app runs under its own Content-Security-Policy (server/headers.py): booting Pyodide, the
service worker, signing up, a message with a table, the demo assistant's answer over the live
socket, Python in the worker, and the pages beside the app, with no violation reported."""

from __future__ import annotations

from playwright.sync_api import ConsoleMessage, Page, expect

from shared.assistants import demo_answer
from tests.e2e.contexts import Contexts
from tests.e2e.pages import send, sign_up, wait_for_service_worker
from tests.processes import Server

# Each page records the violations it sees (the init script runs before any of the page's own).
RECORD_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.cspViolations.push(`${e.effectiveDirective} refused ${e.blockedURI || "inline"} (${e.sourceFile}:${e.lineNumber})`);
});
"""


def violations(page: Page) -> list[str]:
    found: list[str] = page.evaluate("window.cspViolations")
    return found


def test_the_app_works_under_its_content_security_policy(contexts: Contexts, server: Server) -> None:
    context = contexts.new(server.url)
    context.add_init_script(RECORD_VIOLATIONS)
    console: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            console.append(message.text)

    context.on("console", on_console)
    page = context.new_page()
    page.on("console", on_console)
    response = page.goto("/")
    assert response is not None and "wasm-unsafe-eval" in response.headers["content-security-policy"]
    sign_up(page)
    wait_for_service_worker(page)

    send(page, "| left | middle | right |\n|:--|:-:|--:|\n| 1 | 2 | 3 |")  # alignment: classes, not styles
    expect(page.locator(".message.user td.align-center")).to_have_text("2")
    assert page.evaluate("getComputedStyle(document.querySelector('.message.user td.align-right')).textAlign") == "right"
    send(page, "Hello under a policy", assistant="demo")  # its tokens come over the live socket
    expect(page.locator(".message.assistant.completed .content")).to_have_text(
        demo_answer("Hello under a policy", 2), timeout=30_000
    )
    assert page.evaluate("chatHost.runPython('print(6 * 7)', 30)") == "42"  # Pyodide in the worker
    assert violations(page) == [] and console == []

    page.goto("/docs")  # its script and style are files now
    expect(page.locator("#paths section").first).to_be_visible()
    assert violations(page) == []
    page.goto("/help/home-network")
    expect(page.locator("h2")).to_have_text("Serving on your home network (HTTPS)")
    assert page.evaluate("getComputedStyle(document.body).maxWidth") != "none"  # page.css applies
    assert violations(page) == [] and console == []
    context.close()
