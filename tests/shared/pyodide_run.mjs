// Runs Python under Pyodide in Node.js, with the same vendored Pyodide and wheels the browser gets.
// usage: node pyodide_run.mjs <vendor dir> <bundle.zip> <script.py>
// The script's `result` variable is printed as JSON on the last line of stdout.
import { readFileSync, readdirSync } from "node:fs";

const [vendor, bundlePath, scriptPath] = process.argv.slice(2);
const core = `${vendor}/pyodide/${readdirSync(`${vendor}/pyodide`)[0]}`; // (the one pinned version)
const { loadPyodide } = await import(`${core}/pyodide.mjs`);
const pyodide = await loadPyodide({
  indexURL: `${core}/`, stdLibURL: `${vendor}/python_stdlib.zip`, stdout: () => {}, stderr: console.error,
});
const wheels = readdirSync(`${vendor}/wheels`).filter((f) => f.endsWith(".whl")).map((f) => `${vendor}/wheels/${f}`);
await pyodide.loadPackage(wheels, { messageCallback: () => {} });
pyodide.unpackArchive(new Uint8Array(readFileSync(bundlePath)), "zip", { extractDir: "/home/pyodide" });
await pyodide.runPythonAsync(readFileSync(scriptPath, "utf8"));
console.log(pyodide.runPython("import json, sys; json.dumps({'result': result, 'version': sys.version})"));
