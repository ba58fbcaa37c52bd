// Makes the memory snapshot Python starts from (static/app.js: startPython): a Pyodide of its own,
// started with no snapshot and nothing of ours, the standard library modules we use imported,
// then its memory, kept in Cache Storage. It runs once the page is interactive, off the page's
// thread (an interpreter that made a snapshot is not fit to go on with: its calls into the page
// fail), and only when no snapshot of this build is kept.
import { loadPyodide } from "/static/vendor/pyodide/314.0.7/pyodide.mjs";

self.onmessage = async ({ data: { options, imports, cacheName, key } }) => {
  try {
    const pyodide = await loadPyodide({ ...options, _makeSnapshot: true });
    pyodide.runPython(`import importlib\nfor name in ${JSON.stringify(imports)}:\n    try:\n        importlib.import_module(name)\n    except Exception:\n        pass`);
    const snapshot = pyodide.makeMemorySnapshot();
    const cache = await caches.open(cacheName);
    for (const old of await cache.keys()) if (old.url !== key) await cache.delete(old);
    await cache.put(key, new Response(snapshot));
    self.postMessage({ bytes: snapshot.length });
  } catch (error) {
    self.postMessage({ error: String(error) });
  }
};
