// How Python starts in the page, and what makes the next start faster (measured steps in README,
// "Start-up"): both kept in Cache Storage ("python-start"; not "chat-…", which the service worker
// owns), both made after the page is interactive by static/warm-worker.js, off the page's thread:
// - a memory snapshot of the interpreter with the standard library modules we use imported, which
//   skips most of Pyodide's own start-up; our wheels load on top of it (a snapshot cannot hold
//   them: pyodide/pyodide#5195, #6418). Tied to the Pyodide build (the version is in its URL) and
//   to SNAPSHOT_IMPORTS and to whether Pyodide runs with JSPI (static/no-jspi.js: it does not,
//   unless the browser would not let it go; a snapshot made before, with JSPI, is not loaded); one
//   that fails to load is deleted and the page starts again without it.
// - the .pyc files of the modules the page imports from our wheels and bundle, keyed by a hash of
//   the bundle and the lock file (so by the exact sources), which skips compiling them.
import { JSPI } from "/static/no-jspi.js"; // (first: before Pyodide starts)
import { loadPyodide } from "/static/vendor/pyodide/314.0.7/pyodide.mjs";

const PYODIDE_URL = "/static/vendor/pyodide/314.0.7/";
const CACHE = "python-start";
const SNAPSHOT_IMPORTS = [
  "asyncio", "json", "sqlite3", "re", "dataclasses", "datetime", "decimal", "enum", "typing", "uuid",
  "collections", "functools", "html", "html.parser", "inspect", "base64", "hashlib", "hmac", "random",
  "secrets", "string", "textwrap", "unicodedata", "zlib", "zipfile", "logging", "email", "calendar",
  "fractions", "numbers", "copy", "weakref", "ast", "dis", "tokenize", "traceback", "linecache",
  "bisect", "heapq", "contextvars", "struct", "math", "zoneinfo", "urllib.parse", "ipaddress", "pathlib",
  // What Pyodide's package loader imports as it installs the first wheel (zip members' names in
  // cp437, a wheel's metadata; it imports tarfile whatever the archive): 300-380 ms of every start
  // outside the snapshot, here.
  "tarfile", "importlib.metadata", "encodings.cp437",
];
// (Named by the list itself: a snapshot made with other imports is never loaded for this one.)
const SNAPSHOT_KEY = new URL(`${PYODIDE_URL}snapshot-${JSPI ? "jspi" : "nojspi"}-${fnv1a(SNAPSHOT_IMPORTS.join(" "))}.bin`, location).href;
const FAILED = "chat-snapshot-failed";
// Our modules and those of our wheels, as the page imported them (what the bytecode holds), and
// those the warm-up imports (webapp/markdown.py: warm_sources), whether it has run yet or not.
const IMPORTED = `
import json, sys
from webapp.markdown import warm_sources
json.dumps(sorted({
    m.__file__ for m in list(sys.modules.values())
    if (getattr(m, "__file__", None) or "").endswith(".py")
    and m.__file__.startswith(("/lib/python3.14/site-packages/", "/home/pyodide/"))
} | set(warm_sources())))`;

const opened = globalThis.caches ? caches.open(CACHE).catch(() => null) : Promise.resolve(null); // (secure contexts only)
const wanted = { snapshot: false, bytecode: null };

// Pyodide with our wheels loaded, from the snapshot when there is one.
export async function startPython(lockFileURL, packages, mark) {
  const options = { indexURL: PYODIDE_URL, stdLibURL: "/static/vendor/python_stdlib.zip", lockFileURL };
  const cache = await opened;
  const saved = cache && await cache.match(SNAPSHOT_KEY);
  let pyodide;
  if (saved) {
    try {
      pyodide = await loadPyodide({ ...options, _loadSnapshot: new Uint8Array(await saved.arrayBuffer()) });
      pyodide.runPython("import random; random.seed()"); // (else every start draws the same numbers)
    } catch (error) {
      await cache.delete(SNAPSHOT_KEY);
      if (!sessionStorage.getItem(FAILED)) {
        sessionStorage.setItem(FAILED, "1");
        location.reload();
        await new Promise(() => {});
      }
      throw error;
    }
  } else {
    wanted.snapshot = cache !== null;
    pyodide = await loadPyodide(options);
  }
  document.body.dataset.python = saved ? "snapshot" : "fresh"; // (for the tests)
  mark("python");
  await pyodide.loadPackage(packages, { messageCallback: () => {} });
  wanted.options = { indexURL: PYODIDE_URL, stdLibURL: options.stdLibURL, lockFileURL }; // (loadPyodide adds to its own)
  wanted.packages = packages;
  return pyodide;
}

// Our bundle unpacked, with the bytecode of its and our wheels' modules when it is kept.
export async function unpackBundle(pyodide, bundle, lockText) {
  pyodide.unpackArchive(bundle, "zip", { extractDir: "/home/pyodide" });
  const cache = await opened;
  if (!cache || !crypto.subtle) return;
  const sources = new Uint8Array(bundle.byteLength + lockText.length * 3);
  sources.set(new Uint8Array(bundle));
  const { written } = new TextEncoder().encodeInto(lockText, sources.subarray(bundle.byteLength));
  const digest = await crypto.subtle.digest("SHA-256", sources.subarray(0, bundle.byteLength + written));
  const hex = [...new Uint8Array(digest)].slice(0, 12).map((b) => b.toString(16).padStart(2, "0")).join("");
  const key = new URL(`${PYODIDE_URL}bytecode-${hex}.zip`, location).href;
  const saved = await cache.match(key);
  if (saved) {
    pyodide.unpackArchive(await saved.arrayBuffer(), "zip", { extractDir: "/pyc" });
    pyodide.runPython("import sys; sys.pycache_prefix = '/pyc'");
    document.body.dataset.bytecode = "kept"; // (for the tests)
  } else {
    wanted.bytecode = { key, bundle: bundle.slice(0) };
  }
}

// Once the page is interactive: what the next start begins from, if it is not kept yet; one worker
// after the other.
export async function warmNextStart(pyodide) {
  const tasks = [];
  if (wanted.snapshot) tasks.push({ task: "snapshot", key: SNAPSHOT_KEY, imports: SNAPSHOT_IMPORTS, options: wanted.options });
  if (wanted.bytecode) {
    const sources = JSON.parse(pyodide.runPython(IMPORTED));
    tasks.push({ task: "bytecode", ...wanted.bytecode, sources, options: wanted.options, packages: wanted.packages });
  }
  wanted.snapshot = false;
  wanted.bytecode = null;
  for (const task of tasks) {
    await new Promise((resolve) => {
      const worker = new Worker("/static/warm-worker.js", { type: "module" });
      worker.onmessage = ({ data }) => {
        if (data.error) console.warn(`no Python ${task.task} kept:`, data.error);
        worker.terminate();
        resolve();
      };
      worker.postMessage({ ...task, cacheName: CACHE });
    });
  }
}

// A short hash of a string (32-bit FNV-1a, as 8 hex digits), for a cache key.
function fnv1a(text) {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return (hash >>> 0).toString(16).padStart(8, "0");
}
