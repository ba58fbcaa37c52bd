// Bootstrap (after static/paint.js has painted the last screen): Pyodide with our own lock file
// (static/python-start.js), the local database's files read from IndexedDB beside it
// (static/storage.js), then our Python (webapp.browser.main), then the service worker. Everything
// is served from this origin; nothing from a CDN.
import { startPython, unpackBundle, warmNextStart } from "/static/python-start.js";
import * as earlyFiles from "/static/early-files.js";
import * as attachments from "/static/files.js";
import * as pending from "/static/pending.js";
import * as storage from "/static/storage.js";
import * as view from "/static/view.js";

const status = document.getElementById("status");
const fail = (text, error) => {
  status.textContent = text;
  status.dataset.state = "error";
  console.error(text, error);
};

// On a first visit the worker is registered once the app has started (body[data-ready]): its
// precache then reads from the HTTP cache what the page has just downloaded, rather than
// downloading everything a second time. A page the worker controls already registers at once
// (its files come from the worker's cache; this checks for a new version).
async function registerServiceWorker() {
  if (!("serviceWorker" in navigator)) return;
  if (!navigator.serviceWorker.controller && document.body.dataset.ready !== "true") {
    await new Promise((resolve) => {
      const observer = new MutationObserver(() => {
        if (document.body.dataset.ready !== "true") return;
        observer.disconnect();
        resolve();
      });
      observer.observe(document.body, { attributes: true, attributeFilter: ["data-ready"] });
    });
  }
  const registration = await navigator.serviceWorker.register("/sw.js", { scope: "/" });
  const offerUpdate = (worker) => {
    const banner = document.getElementById("update");
    banner.hidden = false;
    document.getElementById("update-now").onclick = () => worker.postMessage("skipWaiting");
  };
  const watch = (worker) => worker?.addEventListener("statechange", () => {
    if (worker.state === "installed" && navigator.serviceWorker.controller) offerUpdate(worker);
  });
  if (registration.waiting && navigator.serviceWorker.controller) offerUpdate(registration.waiting);
  watch(registration.installing); // (an update the browser began on its own, before this ran)
  registration.addEventListener("updatefound", () => watch(registration.installing));
  let reloading = false;
  navigator.serviceWorker.addEventListener("controllerchange", () => {
    if (reloading || !window.chatUpdating) return;
    reloading = true;
    location.reload();
  });
  document.getElementById("update-now").addEventListener("click", () => { window.chatUpdating = true; });
}

// Not a secure context (plain HTTP from another device): no service worker, so no opening
// offline nor installing. Said once per tab, with where to read how to serve it over HTTPS.
function showInsecureNotice() {
  const notice = document.getElementById("insecure");
  if (sessionStorage.getItem("chat-insecure-dismissed")) return;
  notice.hidden = false;
  document.getElementById("insecure-dismiss").addEventListener("click", () => {
    notice.hidden = true;
    sessionStorage.setItem("chat-insecure-dismissed", "1");
  });
}

// One tab owns the database at a time (Web Locks): each tab has its own copy in memory, so two
// writing tabs would overwrite each other's chunks. The owner holds OWNER_LOCK for its life;
// every read or write of the stored files, in any tab, runs under IO_LOCK, so a tab taking over
// reads the database only after the previous owner's last write has finished, and a tab that
// lost ownership writes nothing more. A page that is not a secure context (plain HTTP from
// another device) has no Web Locks: static/locks.js stands in for them, with the same guarantees.
const OWNER_LOCK = "chat-db-owner";
const IO_LOCK = "chat-db-io";
const lockManager = navigator.locks ? Promise.resolve(navigator.locks) : import("/static/locks.js");
let owner = false;

class OwnedElsewhere extends Error {}

function claimOwnership(steal) {
  return new Promise((resolve, reject) => {
    lockManager.then((locks) => locks.request(OWNER_LOCK, steal ? { steal: true } : { ifAvailable: true }, async (lock) => {
      if (!lock) return reject(new OwnedElsewhere("owned by another tab"));
      owner = true;
      resolve();
      await new Promise(() => {}); // held until the page goes, or another tab takes it
    })).catch((error) => {
      if (owner) lostOwnership();
      else reject(error); // (no lock granted nor refused: the app cannot start)
    });
  });
}

function showElsewhere(onUseHere) {
  const root = document.getElementById("root");
  root.innerHTML = `<div class="elsewhere" role="alert"><p>This chat is open in another tab.</p>
    <button type="button" id="use-here">Use it here</button></div>`;
  document.getElementById("use-here").addEventListener("click", onUseHere, { once: true });
  status.textContent = "Open in another tab";
  status.dataset.state = "elsewhere";
}

function lostOwnership() {
  owner = false;
  globalThis.chatStop?.();
  showElsewhere(() => {
    sessionStorage.setItem("chat-take-over", "1");
    location.reload();
  });
}

async function becomeOwner() {
  const takeOver = sessionStorage.getItem("chat-take-over") === "1";
  sessionStorage.removeItem("chat-take-over");
  try {
    await claimOwnership(takeOver);
  } catch (error) {
    if (!(error instanceof OwnedElsewhere)) throw error;
    await new Promise((resolve) => showElsewhere(resolve));
    document.getElementById("root").innerHTML = '<p class="boot">Opening your chats…</p>';
    await claimOwnership(true);
  }
}

function underIoLock(work) {
  return lockManager.then((locks) => locks.request(IO_LOCK, () => {
    if (!owner) throw new Error("this tab no longer owns the database");
    return work();
  }));
}

// Writes run one at a time, in the order Python asked for them, each with the bytes as they were
// when it was asked for (storage.capture).
let writeChain = Promise.resolve();
function persist(pyodide, writes) {
  const captured = storage.capture(pyodide, "/data", JSON.parse(writes));
  const run = () => underIoLock(() => storage.write(captured));
  writeChain = writeChain.then(run, run);
  return writeChain;
}

// The local helper's Python tool, in a worker of its own (static/python-worker.js): a snippet that
// runs longer than `seconds` is stopped by ending the worker (the next one starts afresh). The
// same worker reads a PDF's text for the model on this device (readPdf: pypdf is loaded there,
// and only then). One job at a time. `seconds` counts from the job's start in the worker: a
// worker's own start (Pyodide, and pypdf for a PDF) has WORKER_START_SECONDS of its own, as it
// took over 20 s on a loaded machine, and a slow phone's first snippet was stopped for it.
const WORKER_START_SECONDS = 120;
let pythonWorker = null;
let pythonChain = Promise.resolve();
function oneJob(message, seconds, transfer) {
  pythonWorker ||= new Worker("/static/python-worker.js", { type: "module" });
  const worker = pythonWorker;
  return new Promise((resolve, reject) => {
    const stopAfter = (limit, why) =>
      setTimeout(() => {
        worker.terminate();
        if (pythonWorker === worker) pythonWorker = null;
        reject(new Error(why));
      }, limit * 1000);
    let timer = stopAfter(WORKER_START_SECONDS, `Python did not start in ${WORKER_START_SECONDS} s`);
    worker.onmessage = (event) => {
      clearTimeout(timer);
      if (event.data.running) timer = stopAfter(seconds, `stopped after ${seconds} s without finishing`);
      else if (event.data.error !== undefined) reject(new Error(event.data.error));
      else resolve(event.data.output);
    };
    worker.postMessage(message, transfer);
  });
}
function inPythonWorker(message, seconds, transfer = []) {
  const run = () => oneJob(message, seconds, transfer);
  const result = pythonChain.then(run, run);
  pythonChain = result.catch(() => {});
  return result;
}
const runPython = (code, seconds) => inPythonWorker({ code }, seconds);
// A PDF's bytes (a Uint8Array, handed over) -> its text, "" when it has none (webapp/browser.py).
const readPdf = (bytes, seconds) => inPythonWorker({ pdf: bytes }, seconds, [bytes.buffer]);

// Python's answer to an action, once it has done it (its effects durable where it writes). An
// action taken before Python is ready (on the screen painted from the render cache) waits for it,
// in order.
let pythonStarted;
const pythonReady = new Promise((resolve) => { pythonStarted = resolve; });
// While a message just sent is not on screen yet (sendFromComposer): every action waits for the
// frame that shows it, the message's own first, so Python has them in the order they came.
let shownFirst = null;
async function dispatch(action, data) {
  if (!globalThis.chatDispatch) await pythonReady;
  if (shownFirst) await shownFirst;
  const pending = globalThis.chatDispatch?.(action, JSON.stringify(data));
  if (!pending) return;
  try {
    await pending;
  } finally {
    pending.destroy();
  }
}

// Drafts: kept by the page at every keystroke (static/pending.js), then handed to Python once
// durable here (so the chat list's Draft mark means durable), one at a time; the next carries
// everything typed meanwhile (per chat, so switching chats mid-save loses nothing).
const draftsWanted = new Map(); // chat -> text not handed to Python yet
let draftSaving = false;
async function saveDrafts() {
  if (draftSaving || draftsWanted.size === 0) return;
  const [chat, text] = draftsWanted.entries().next().value;
  draftsWanted.delete(chat);
  draftSaving = true;
  try {
    await dispatch("draft", { chat, text });
  } catch (e) {
    console.error("draft not saved", e); // (the page keeps it: Python adopts it at the next start)
  } finally {
    draftSaving = false;
    saveDrafts();
  }
}
pending.onDraftKept((chat, { text }) => {
  draftsWanted.set(chat, text);
  saveDrafts();
});

// What the page kept in its last life (drafts, and messages sent that Python may not have got),
// read before anything else: a composer painted with older text gets the newer, and the messages
// show at once, as being saved, and go to Python first once it is up.
const keptAtStart = pending.read();
if (globalThis.chatPainted) { // (the painted composer at its text's height: the cache keeps no size, view.js: saveScreen)
  const box = document.getElementById("composer-text");
  if (box) view.fitComposer(box);
}
keptAtStart.then(({ drafts }) => {
  const box = document.getElementById("composer-text");
  const painted = globalThis.chatPainted;
  const typed = box && painted && drafts[box.dataset.chat];
  if (typed && box.value === painted.text) { // (not typed into since it was painted)
    box.value = painted.text = typed.text;
    view.fitComposer(box);
  }
});
// ...and the files attached on that screen, and sent with those messages (static/early-files.js).
keptAtStart.then(async ({ sends, files }) => {
  for (const send of sends) view.showSending(send, await shownFiles(send.files));
  await earlyFiles.restore(files);
}).catch((e) => console.error("what this page kept could not be shown", e));

// A message's files as the page draws them before Python: an image from this device's IndexedDB.
async function shownFiles(files = []) {
  return Promise.all(files.map(async ({ sha256, name, width }) => ({
    name, src: width ? await attachments.keptUrl(sha256).catch(() => "") : "",
  })));
}

// Messages sent from the composer, in the order they were sent: each is kept by the page and
// drawn at once, then given to Python (which waits for Python to be up), then forgotten here once
// Python has it durably. Its id is made here, so a message given twice (a reload in between) is
// saved once.
let sendChain = keptAtStart.then(({ sends }) => sends.forEach((send) => handOver(send)), () => {});
// (`ready`: the send as kept once the files it took are all kept; given to Python then.)
function handOver(send, ready = null) {
  // (The page's drawing of the message stays until Python's drawing of it, a frame or two after
  // Python has it, morphs it in place; Python says when it does not take it: view.endSending.)
  const give = async () => dispatch("send", (await ready?.catch(() => null)) ?? send).then(
    () => pending.forgetSend(send.id),
    (e) => {
      console.error("message not saved", e);
      view.endSending(send.id);
      // Python puts its text back into its chat's draft, saying why; should it not have got that
      // far, the page does, into the composer if it still shows that chat (nothing if it is there).
      const box = document.getElementById("composer-text");
      if (box?.dataset.chat === send.chat && box.hasAttribute("data-draft")) view.putBack(send.chat, send.text, "");
      pending.forgetSend(send.id);
    },
  );
  sendChain = sendChain.then(give, give);
}

function sendFromComposer(form, box) {
  const text = box.value;
  const attached = document.querySelector("#composer-files .chip:not(.refused)");
  if (!text.trim() && !attached) return;
  const draftOf = box.dataset.chat;
  const chat = draftOf || uuid7(); // (no chat yet: the message makes one, with this id)
  // Drawn at once with its files as their chips show them (an image from the same URL): Python,
  // which may still be hashing one, draws the message as it is kept.
  const files = [...document.querySelectorAll("#composer-files .chip:not(.refused):not(.warning)")].map((chip) => ({
    name: chip.querySelector(".name")?.textContent ?? "", src: chip.querySelector("img")?.getAttribute("src") ?? "",
  }));
  // The files it takes: before Python is up, every chip's (Python gets exactly these); once it
  // is up, those the page attached itself, beside the draft's that Python adds (`draft`).
  const python = Boolean(globalThis.chatDispatch);
  const taken = earlyFiles.takeForSend(draftOf ?? "");
  const carried = !python || taken.files.length || taken.waiting ? { files: taken.files } : {};
  const send = pending.keepSend({
    id: uuid7(), chat, newChat: !draftOf, text, assistant: new FormData(form).get("assistant") ?? undefined,
    ...carried, ...(python && carried.files ? { draft: true } : {}),
  });
  const ready = taken.waiting ? taken.all.then((all) => pending.keepSend({ ...send, files: all })) : null;
  pending.keepDraft(draftOf, ""); // the message supersedes its draft
  draftsWanted.delete(draftOf);
  box.value = "";
  if (!draftOf) view.composeIn(chat);
  view.fitComposer(box);
  view.showSending(send, files);
  shownFirst = painted(); // (the message on screen first: Python's work on it, and on what follows, after that frame)
  handOver(send, ready);
}

// Once the page has painted what it holds now: after the next frame (or, should no frame come, a
// hidden page, a moment later).
function painted() {
  const frame = new Promise((resolve) => {
    requestAnimationFrame(() => setTimeout(resolve, 0));
    setTimeout(resolve, 100);
  }).then(() => {
    if (shownFirst === frame) shownFirst = null;
  });
  return frame;
}

// A UUIDv7 (RFC 9562): the time in milliseconds, then random bits; as the ids Python makes.
function uuid7() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  let now = Date.now();
  for (let i = 5; i >= 0; i--, now = Math.floor(now / 256)) bytes[i] = now % 256;
  bytes[6] = (bytes[6] & 0x0f) | 0x70;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// Search as the user types: one search at a time, the next one with what the box holds then.
let searchWanted = null;
let searching = false;
async function search(text) {
  searchWanted = text;
  if (searching) return;
  searching = true;
  try {
    while (searchWanted !== null) {
      const next = searchWanted;
      searchWanted = null;
      await dispatch("search", { text: next }).catch(() => {});
    }
  } finally {
    searching = false;
  }
}

// Files picked, dropped or pasted into the composer: held here, given to Python to attach
// (webapp/files.py) to the draft of the chat the composer is in; before Python is up, attached
// by the page itself (static/early-files.js).
function attach(list) {
  const box = document.getElementById("composer-text");
  if (!list.length || !box || !box.hasAttribute("data-draft")) return;
  if (!globalThis.chatDispatch) return earlyFiles.attach(box.dataset.chat ?? "", [...list]);
  dispatch("attach", { chat: box.dataset.chat, files: [...list].map(attachments.hold) }).catch(() => {});
}

// The image at full size (the chat shows its thumbnail), from this device's IndexedDB.
async function viewImage(button) {
  const dialog = document.getElementById("image-view");
  const img = document.getElementById("image-view-img");
  const shown = button.querySelector("img");
  img.src = (await attachments.full(button.dataset.sha256).catch(() => "")) || shown.src;
  img.alt = shown.alt;
  dialog.setAttribute("aria-label", shown.alt);
  dialog.showModal(); // (Escape closes it)
}

function copyFrom(button) {
  const action = button.dataset.action;
  const text = action === "copy-code"
    ? button.closest(".code").querySelector("code").textContent
    : globalThis.chatSource?.(button.dataset.id) ?? "";
  view.copy(text, button);
}

// One delegated listener for the whole UI: elements carry data-action, Python does the rest
// (Copy and Jump to latest are the page's own).
function wireEvents() {
  const send = (action, data) => dispatch(action, data).catch(() => {}); // (Python logs its failures)
  document.addEventListener("click", (e) => {
    const target = e.target.closest("[data-action], #jump");
    if (!target || target.tagName === "FORM") return;
    e.preventDefault();
    if (target.id === "jump") return view.jumpToLatest();
    if (target.dataset.action === "copy" || target.dataset.action === "copy-code") return copyFrom(target);
    if (target.dataset.action === "attach-files") return document.getElementById("attach-input")?.click();
    if (target.dataset.action === "view-image") return viewImage(target);
    if (earlyFiles.handles(target)) return earlyFiles.remove(target);
    send(target.dataset.action, { ...target.dataset });
  });
  // The assistant chosen in the composer is remembered as soon as it is chosen.
  document.addEventListener("change", async (e) => {
    if (e.target.matches("#assistant-choice")) {
      send("choose-assistant", { assistant: e.target.value });
      earlyFiles.drawImageNote(); // (before Python is up; Python draws its own)
    }
    if (e.target.matches("input[data-attach]")) {
      attach(e.target.files);
      e.target.value = "";
    }
    if (e.target.matches("input[data-import]") && e.target.files.length) {
      const file = e.target.files[0];
      e.target.value = "";
      send("import", { name: file.name, ...(await attachments.readExport(file)) });
    }
  });
  document.addEventListener("input", (e) => {
    if (e.target.matches("[data-search]")) return search(e.target.value);
    if (e.target.matches("textarea[data-count]")) view.countInto(e.target);
    if (!e.target.matches("#composer-text")) return;
    view.fitComposer(e.target);
    if (!e.target.hasAttribute("data-draft")) return; // editing a message: not the chat's draft
    pending.keepDraft(e.target.dataset.chat, e.target.value);
  });
  document.addEventListener("submit", (e) => {
    const form = e.target.closest("form[data-action]");
    if (!form) return;
    e.preventDefault();
    const box = form.querySelector("#composer-text[data-draft]");
    if (form.dataset.action === "send" && box) return sendFromComposer(form, box);
    const sent = send(form.dataset.action, Object.fromEntries(new FormData(form, e.submitter)));
    // Cleared now, not after Python has saved it: what the user types next goes in a clean box.
    // Before Python is ready the text stays in the box until it has been sent.
    if (!form.hasAttribute("data-reset")) return;
    form.querySelectorAll("textarea").forEach((box) => {
      const clear = () => {
        box.value = "";
        view.fitComposer(box);
      };
      if (globalThis.chatDispatch) return clear();
      const text = box.value;
      sent.then(() => box.value === text && clear());
    });
  });
  document.addEventListener("keydown", (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === "k") {
      const box = document.getElementById("search");
      if (!box) return;
      e.preventDefault();
      view.toggleChats(true);
      box.focus();
      box.select();
      return;
    }
    if (e.key === "Escape" && e.target.matches("[data-search]") && e.target.value) {
      e.target.value = "";
      return search("");
    }
    if (e.key === "Escape" && e.target.closest("form.rename")) return send("cancel-rename", {});
    if (e.key === "Escape" && e.target.closest("form.chat-instructions-form")) return send("cancel-chat-instructions", {});
    if (e.key === "Escape" && document.getElementById("root").dataset.drawer === "open") return view.toggleChats(false);
    // Enter sends on a desktop; on a touch screen it is a new line (Send is the button), and an
    // Enter that ends an input method's composition never sends.
    if (e.key !== "Enter" || e.shiftKey || e.isComposing || e.keyCode === 229 || !e.target.matches("#composer-text")) return;
    if (matchMedia("(pointer: coarse)").matches) return;
    e.preventDefault();
    e.target.form.requestSubmit();
  });
  // A file dropped anywhere on the chat, or an image pasted into the composer, is attached.
  document.addEventListener("dragover", (e) => {
    if (e.target.closest?.("#chat") && e.dataTransfer?.types.includes("Files")) e.preventDefault();
  });
  document.addEventListener("drop", (e) => {
    if (!e.target.closest?.("#chat") || !e.dataTransfer?.files.length) return;
    e.preventDefault();
    attach(e.dataTransfer.files);
  });
  document.addEventListener("paste", (e) => {
    if (!e.target.matches("#composer-text") || !e.clipboardData?.files.length) return;
    if (!e.clipboardData.types.includes("text/plain")) e.preventDefault();
    attach(e.clipboardData.files);
  });
  window.addEventListener("online", () => globalThis.chatOnline?.());
  view.wire();
}

// In the lock (so served, checked and precached like the others) but not loaded at start: pypdf
// is loaded by the Python worker when a PDF is to be read (readPdf).
const LAZY_PACKAGES = ["pypdf"];

async function boot() {
  earlyFiles.start({ dispatch, pythonUp: () => Boolean(globalThis.chatDispatch) });
  if (globalThis.isSecureContext === false) showInsecureNotice();
  registerServiceWorker().catch((e) => console.warn("service worker", e));
  wireEvents();
  if (navigator.storage?.persist) navigator.storage.persist().catch(() => {});
  const lockFileURL = new URL("/static/vendor/app-lock.json", location).href; // must be absolute
  const lockText = await (await fetch(lockFileURL)).text();
  const packages = Object.keys(JSON.parse(lockText).packages).filter((name) => !LAZY_PACKAGES.includes(name));
  const [pyodide, bundle, files] = await Promise.all([
    startPython(lockFileURL, packages, mark).then(step("pyodide")),
    fetch("/py/app.zip").then((r) => r.arrayBuffer()).then(step("bundle")),
    // The database's files, read while Python starts (once this tab owns them).
    becomeOwner().then(step("owner")).then(() => underIoLock(() => storage.read())).then(step("database read")),
  ]);
  const missing = packages.filter((name) => !pyodide.loadedPackages[name]);
  if (missing.length) throw new Error(`packages failed to load: ${missing.join(", ")}`);
  await unpackBundle(pyodide, bundle, lockText);
  pyodide.FS.mkdirTree("/data");
  const stored = await underIoLock(() => storage.install(pyodide, "/data", files));
  mark("database installed");
  globalThis.chatView = view;
  globalThis.chatFiles = attachments;
  globalThis.chatHost = {
    persist: (writes) => persist(pyodide, writes),
    stored: JSON.stringify(stored),
    // The drafts this page kept, for Python to adopt before it draws the composer.
    drafts: async () => JSON.stringify((await pending.read()).drafts),
    forgetDrafts: (gone) => pending.forgetDrafts(JSON.parse(gone)),
    // The files attached to drafts before Python was up, for Python to adopt likewise.
    draftFiles: async () => JSON.stringify(await earlyFiles.withUrls((await pending.read()).files)),
    forgetFiles: (gone) => pending.forgetFiles(JSON.parse(gone)),
    rememberFileLimit: (bytes) => earlyFiles.rememberLimit(bytes),
    rememberRoom: (json) => earlyFiles.rememberRoom(JSON.parse(json)),
    rememberImageNotes: (json) => earlyFiles.rememberImageNotes(json),
    runPython,
    readPdf,
    // A GET sent at once, its body read as soon as its headers come (not when Python, busy
    // storing the page before, would ask for it): [status, Uint8Array].
    fetchBytes: (url) =>
      fetch(url, { credentials: "same-origin" }).then(async (r) => [r.status, new Uint8Array(await r.arrayBuffer())]),
  };
  globalThis.pyodide = pyodide;
  await pyodide.runPythonAsync("import webapp.browser\nchat_client = await webapp.browser.main()");
  document.body.dataset.ready = "true";
  mark("interactive");
  pythonStarted();
  earlyFiles.pythonStarted();
  setTimeout(() => warmNextStart(pyodide).catch((e) => console.warn("next start", e)), 2000);
}

// Start-up steps as performance marks ("chat:<name>"), which tests/bench/bench_browser.py reads;
// step(name) marks as a promise's value goes by.
const mark = (name) => performance.mark(`chat:${name}`);
const step = (name) => (value) => {
  mark(name);
  return value;
};

boot().catch((e) => fail("The app could not start: reload to try again.", e));
