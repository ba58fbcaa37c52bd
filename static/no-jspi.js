// Pyodide without JSPI (WebAssembly stack switching), in the page and in our workers: imported
// before Pyodide, which decides at its start whether the browser has JSPI ("Suspending" or the
// older "Suspender" in WebAssembly) and then runs its calls into Python on stacks of their own.
// Chromium's heap profiler, which Chromium turns on at random in some sessions (about 1 launch in
// 30 measured here), walks a sampled allocation's stack by frame pointers up to the thread's own
// stack end, and from such a stack it runs into the guard page past it: the tab crashes (SIGSEGV)
// at Python's start. Nothing of ours needs JSPI (no run_sync: our Python is async); without it
// Pyodide calls into Python on the thread's own stack, as in a browser that has no JSPI. (Forced
// on, the profiler crashed the page's start every time; the workers, which call Python
// synchronously, did not crash with JSPI in the test, but import this too: the warm-up worker
// makes the page's snapshot, which must be made as the page runs, and the tool's worker is kept
// the same as the page.)
delete WebAssembly.Suspending;
delete WebAssembly.Suspender;

// Whether JSPI is still there (the properties could not be removed): a memory snapshot made with
// it is kept apart from one made without (static/python-start.js keys it by this).
export const JSPI = "Suspending" in WebAssembly || "Suspender" in WebAssembly;
