// Makes what the next start of Python begins from (static/python-start.js: startPython), off the page's
// thread, once the page is interactive, and keeps it in Cache Storage; each task in a worker of its
// own, a Pyodide of its own:
// - "snapshot": Pyodide started with nothing of ours, the standard library modules we use
//   imported, then its memory (an interpreter that made a snapshot is not fit to go on with: its
//   calls into JavaScript fail, hence not the page's own);
// - "bytecode": our wheels and bundle (the page's bytes), and the modules the page imported
//   compiled to .pyc files (unchecked: the cache key names the exact sources), in one zip.
import "/static/no-jspi.js"; // (first: Pyodide without JSPI, as in the page)
import { loadPyodide } from "/static/vendor/pyodide/314.0.7/pyodide.mjs";

const COMPILE = `
import importlib.util, io, py_compile, sys, zipfile
sys.pycache_prefix = "/pyc"
out = io.BytesIO()
with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
    for source in sources:
        compiled = importlib.util.cache_from_source(source)
        py_compile.compile(source, cfile=compiled, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        archive.write(compiled, compiled.removeprefix("/pyc/"))
out.getvalue()
`;

async function keep(cacheName, key, prefix, bytes) {
  const cache = await caches.open(cacheName);
  for (const old of await cache.keys()) {
    if (old.url !== key && old.url.split("/").pop().startsWith(prefix)) await cache.delete(old);
  }
  await cache.put(key, new Response(bytes));
}

self.onmessage = async ({ data }) => {
  try {
    if (data.task === "snapshot") {
      const pyodide = await loadPyodide({ ...data.options, _makeSnapshot: true });
      pyodide.runPython(`import importlib\nfor name in ${JSON.stringify(data.imports)}:\n    try:\n        importlib.import_module(name)\n    except Exception:\n        pass`);
      const snapshot = pyodide.makeMemorySnapshot();
      await keep(data.cacheName, data.key, "snapshot-", snapshot);
      self.postMessage({ bytes: snapshot.length });
    } else {
      const pyodide = await loadPyodide({ ...data.options, packages: data.packages });
      pyodide.unpackArchive(data.bundle, "zip", { extractDir: "/home/pyodide" });
      pyodide.globals.set("sources", pyodide.toPy(data.sources));
      const zip = pyodide.runPython(COMPILE).toJs();
      await keep(data.cacheName, data.key, "bytecode-", zip);
      self.postMessage({ bytes: zip.length });
    }
  } catch (error) {
    self.postMessage({ error: String(error) });
  }
};
