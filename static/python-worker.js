// The local helper's Python tool runs here, in a Pyodide of its own, so that a snippet that never
// ends can be stopped (the page terminates this worker) without freezing the page. It loads only
// the standard library and our webapp/python_tool.py, from this origin (the service worker has
// them for offline use). It also reads a PDF's text for the model on this device, with
// shared/pdf.py, the server's own function: pypdf is loaded then, on the first PDF, not before
// (from this origin too: the lock's wheel, which the service worker keeps).
import "/static/no-jspi.js"; // (first: Pyodide without JSPI, as in the page)
import { loadPyodide } from "/static/vendor/pyodide/314.0.7/pyodide.mjs";

const ready = (async () => {
  const [pyodide, bundle] = await Promise.all([
    // The same lock file as the page's (the service worker has it, and pyodide's own is not shipped).
    loadPyodide({
      indexURL: "/static/vendor/pyodide/314.0.7/",
      stdLibURL: "/static/vendor/python_stdlib.zip", // (trimmed by set-up)
      lockFileURL: new URL("/static/vendor/app-lock.json", location).href,
    }),
    fetch("/py/app.zip").then((r) => r.arrayBuffer()),
  ]);
  pyodide.unpackArchive(bundle, "zip", { extractDir: "/home/pyodide" });
  return pyodide;
})();

// A PDF's bytes (a Uint8Array) -> its text, "" when none could be read.
const PDF_TEXT = `
from shared.pdf import pdf_text
def read_pdf(data):
    return pdf_text(data.to_bytes()) or ""
read_pdf`;
let readPdf = null;

// The page bounds a job's own run, not this worker's start: it is told when the job starts
// ({running: true}), once Python (and pypdf, for a PDF) is up.
self.onmessage = async (event) => {
  try {
    const pyodide = await ready;
    if (event.data.pdf !== undefined) {
      if (!readPdf) {
        await pyodide.loadPackage("pypdf", { messageCallback: () => {} });
        readPdf = pyodide.runPython(PDF_TEXT);
      }
      self.postMessage({ running: true });
      self.postMessage({ output: readPdf(event.data.pdf) });
      return;
    }
    self.postMessage({ running: true });
    self.postMessage({ output: pyodide.pyimport("webapp.python_tool").run_python(event.data.code) });
  } catch (error) {
    // A Python exception's message ends with the line that matters; run_python wraps the
    // snippet's own error ("RuntimeError: ZeroDivisionError: ...") and the page wraps it again.
    const lines = String(error.message || error).trim().split("\n");
    self.postMessage({ error: lines[lines.length - 1].replace(/^RuntimeError: /, "") });
  }
};
