"""Browser launch settings shared by every Playwright test (tests/e2e/conftest.py uses them).

Debian's chromium, never a downloaded browser. As root Playwright adds --no-sandbox itself
(chromium_sandbox defaults to False). The other flags keep headless Chromium quiet on a closed
network: no background connections, component updates or sync to hosts it cannot reach.

Chromium's heap profiler is off (HeapProfilerReporting). Chromium draws at each launch whether it
samples allocations in its processes (it did in about 1 launch in 30 here), and a sampled
allocation made while WebAssembly runs on a stack of its own (JSPI stack switching, which Pyodide
uses for every call into Python) walks that stack by frame pointers up to the thread's own stack
end, past the small wasm stack into its guard page: the renderer dies with SIGSEGV ("Page crashed";
Chromium's crash reports, ~/.config/chromium/Crash Reports, show the same faulting instruction each
time). Forcing the profiler on crashed the first start of the app every time. A crash was then a
lottery drawn at each browser launched: the tests that kill and reopen a browser draw most often,
and a suite whose shared browser drew it would crash page after page. The app now starts Pyodide
without JSPI (static/no-jspi.js), and tests/e2e/test_heap_profiler.py forces the profiler on to
show it starts and answers; the rest of the suite keeps it off all the same, so that a crash of
that kind in a test is never a draw of the browser's, and the profiler's cost (a stack walked per
sampled allocation) stays out of the suite's timings.

The browser's own pages are off too (InitialWebUI, PreloadTopChromeWebUI, the WebUI omnibox popups,
WebUIToolbarProcessOverheadExperiment): headless Chromium 156 still preloads its address bar's
popup, chrome://omnibox-popup.top-chrome, in a renderer of its own for each new context, about
0.7 s of CPU each (a Chrome trace of a new context's start: a "WebUI Top Renderer" running lit and
mojo bindings). A headless browser shows no address bar; the page under test is not touched.

Chromium takes only the last --disable-features it is given, and Playwright passes its own list:
ours repeats Playwright's (tests/test_playwright_config.py checks it against the pinned driver).
"""

CHROMIUM = "/usr/bin/chromium"

# Playwright 1.65.2's own --disable-features (its chromiumSwitches), then ours.
PLAYWRIGHT_DISABLED_FEATURES = [
    "AvoidUnnecessaryBeforeUnloadCheckSync", "DestroyProfileOnBrowserClose", "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable", "LensOverlay", "MediaRouter", "PaintHolding",
    "ThirdPartyStoragePartitioning", "AvoidCorsURLLoaderRestartOnRedirect", "TcpPortRandomizationWin",
    "OptimizationHints", "NetworkTimeServiceQuerying", "AimEnabled", "PreconnectToSearch",
    "msForceBrowserSignIn", "msEdgeUpdateLaunchServicesPreferredVersion",
]
DISABLED_FEATURES = [
    *PLAYWRIGHT_DISABLED_FEATURES, "HeapProfilerReporting",
    "InitialWebUI", "WebUIToolbarProcessOverheadExperiment", "PreloadTopChromeWebUI", "WebUIOmniboxPopup", "WebUIOmniboxAimPopup",
]  # fmt: skip

ARGS = [
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--metrics-recording-only",
    "--disable-features=" + ",".join(DISABLED_FEATURES),
]
LAUNCH_ARGS: dict[str, object] = {"executable_path": CHROMIUM, "headless": True, "args": ARGS}

# The suite's browsers (tests/): the same, with WebAssembly compiled by V8's baseline compiler
# (Liftoff) only. A page of a test lives seconds: the optimizing compiler's background work on
# Pyodide's interpreter as it warms up (about 1.7 s of CPU for each new context, measured in a
# Chrome trace: wasm.TopTierCompilation) never pays for itself there, and the suite is bound by
# its two cores. A new context's start of Python then took about 4.9 s of CPU here instead of
# 7.3 (4.2 with the WebUI pages off as well), a sign-up and three sends 0.95 s instead of 1.45. Python runs slower in the page, as on a
# slower phone, which the tests must stand anyway. The benchmarks (tests/bench) and the chaos
# checker's browsers keep LAUNCH_ARGS: what they measure is the browser as people have it.
SUITE_LAUNCH_ARGS: dict[str, object] = {
    **LAUNCH_ARGS,
    "args": [*ARGS, "--js-flags=--liftoff-only"],
}
