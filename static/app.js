// Bootstrap: service worker, Pyodide with our own lock file, the IndexedDB-backed /data mount,
// then our Python (webapp.browser.main). Everything is served from this origin; nothing from a CDN.
import { loadPyodide } from "/static/vendor/pyodide/pyodide.mjs";

const status = document.getElementById("status");
const fail = (text, error) => {
  status.textContent = text;
  status.dataset.state = "error";
  console.error(text, error);
};

// IDBFS writes its files in one readwrite transaction per syncfs; ask for strict durability
// (Chrome's default became relaxed), so "saved" means on disk. The IDBFS database is named
// after its mount point.
const openTransaction = IDBDatabase.prototype.transaction;
IDBDatabase.prototype.transaction = function (stores, mode, options) {
  if (mode === "readwrite" && this.name === "/data") options = { ...(options || {}), durability: "strict" };
  return openTransaction.call(this, stores, mode, options);
};

async function registerServiceWorker() {
  if (!("serviceWorker" in navigator)) return;
  const registration = await navigator.serviceWorker.register("/sw.js", { scope: "/" });
  const offerUpdate = (worker) => {
    const banner = document.getElementById("update");
    banner.hidden = false;
    document.getElementById("update-now").onclick = () => worker.postMessage("skipWaiting");
  };
  if (registration.waiting && navigator.serviceWorker.controller) offerUpdate(registration.waiting);
  registration.addEventListener("updatefound", () => {
    const worker = registration.installing;
    worker?.addEventListener("statechange", () => {
      if (worker.state === "installed" && navigator.serviceWorker.controller) offerUpdate(worker);
    });
  });
  let reloading = false;
  navigator.serviceWorker.addEventListener("controllerchange", () => {
    if (reloading || !window.chatUpdating) return;
    reloading = true;
    location.reload();
  });
  document.getElementById("update-now").addEventListener("click", () => { window.chatUpdating = true; });
}

// One serialized FS.syncfs(false) at a time; each caller waits for a sync that started after it.
let syncChain = Promise.resolve();
function persist(pyodide) {
  const run = () => new Promise((resolve, reject) =>
    pyodide.FS.syncfs(false, (error) => (error ? reject(error) : resolve())));
  syncChain = syncChain.then(run, run);
  return syncChain;
}

// One delegated listener for the whole UI: elements carry data-action, Python does the rest.
function wireEvents() {
  const send = (action, data) => globalThis.chatDispatch?.(action, JSON.stringify(data));
  document.addEventListener("click", (e) => {
    const target = e.target.closest("[data-action]");
    if (!target || target.tagName === "FORM") return;
    e.preventDefault();
    send(target.dataset.action, { ...target.dataset });
  });
  document.addEventListener("submit", (e) => {
    const form = e.target.closest("form[data-action]");
    if (!form) return;
    e.preventDefault();
    send(form.dataset.action, Object.fromEntries(new FormData(form, e.submitter)));
    // Cleared now, not after Python has saved it: what the user types next goes in a clean box.
    if (form.hasAttribute("data-reset")) form.reset();
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && e.target.matches(".composer textarea")) {
      e.preventDefault();
      e.target.form.requestSubmit();
    }
  });
  window.addEventListener("online", () => globalThis.chatOnline?.());
}

async function boot() {
  registerServiceWorker().catch((e) => console.warn("service worker", e));
  wireEvents();
  if (navigator.storage?.persist) navigator.storage.persist().catch(() => {});
  const lockFileURL = new URL("/static/vendor/app-lock.json", location).href; // must be absolute
  const lock = await (await fetch(lockFileURL)).json();
  const packages = Object.keys(lock.packages);
  const [pyodide, bundle] = await Promise.all([
    loadPyodide({ indexURL: "/static/vendor/pyodide/", lockFileURL, packages }),
    fetch("/py/app.zip").then((r) => r.arrayBuffer()),
  ]);
  const missing = packages.filter((name) => !pyodide.loadedPackages[name]);
  if (missing.length) throw new Error(`packages failed to load: ${missing.join(", ")}`);
  pyodide.unpackArchive(bundle, "zip", { extractDir: "/home/pyodide" });
  pyodide.FS.mkdirTree("/data");
  pyodide.FS.mount(pyodide.FS.filesystems.IDBFS, {}, "/data");
  await new Promise((resolve, reject) => pyodide.FS.syncfs(true, (e) => (e ? reject(e) : resolve())));
  globalThis.chatHost = { persist: () => persist(pyodide) };
  globalThis.pyodide = pyodide;
  await pyodide.runPythonAsync("import webapp.browser\nchat_client = await webapp.browser.main()");
  document.body.dataset.ready = "true";
}

boot().catch((e) => fail("The app could not start: reload to try again.", e));
