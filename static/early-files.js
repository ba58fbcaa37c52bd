// Files attached before Python is up (on the screen painted from the render cache), taken by the
// page itself as what is typed and sent there is (static/pending.js): the chip shows at once from
// the picked file (name, size, an image as it is), the file is hashed in the page's worker
// (static/hash-worker.js) and kept in IndexedDB under its SHA-256 (static/files.js, the store
// Python reads), and only then does its reference join the draft, kept by static/pending.js until
// Python has adopted it (webapp/app.py: Client.adopt_draft_files). A reload or a killed browser
// brings the chips back from there. A Send on that screen carries its files' references (the
// bytes durable before the send names them), so Python commits the message with exactly the files
// it was shown with, once.
//
// Once Python is up, attaching is Python's again (webapp/files.py); what the page was still
// attaching then ends here and is handed over the same way. The largest file the server takes is
// the one Python last learnt (kept in localStorage for this), refused here in words before
// anything is kept; so is a file over what the account may still upload (Python keeps the room
// it last counted, the server's Upload-Account-Free less the files it has not uploaded yet; the
// page takes off what it attached itself since); and a message takes at most MAX_FILES. An image
// attached while the chooser's assistant does not read images gets Python's note (Python keeps
// the note of each value of the chooser for this).
import * as attachments from "/static/files.js";
import * as pending from "/static/pending.js";

const LIMIT = "chat-max-file-bytes"; // localStorage: the largest file, as Python last knew it
const ROOM = "chat-account-room"; // ...the bytes of files that may still be attached (absent: not known)
const NOTES = "chat-image-notes"; // ...{value of the chooser: the note on images, or null}
const DEFAULT_MAX_FILE_BYTES = 20 * 1024 * 1024; // (webapp/files.py's, until the server has said)
const MAX_FILES = 32; // per message (webapp/files.py)

const jobs = new Map(); // chip element -> {chat, held, ref, done, taken}
let chain = Promise.resolve(); // the files being attached, one after the other
let host = null; // {dispatch, pythonUp}

const byId = (id) => document.getElementById(id);

export function rememberLimit(bytes) {
  try {
    localStorage.setItem(LIMIT, String(bytes));
  } catch {
    // (no storage: the default holds here, and Python checks again when it takes the file over)
  }
}

function limit() {
  try {
    return Number(localStorage.getItem(LIMIT)) || DEFAULT_MAX_FILE_BYTES;
  } catch {
    return DEFAULT_MAX_FILE_BYTES;
  }
}

// null: not known (never online), and nothing is refused for it.
export function rememberRoom(bytes) {
  try {
    if (bytes === null) localStorage.removeItem(ROOM);
    else localStorage.setItem(ROOM, String(bytes));
  } catch {
    // (no storage: nothing is refused here for it; the server's 413 still is)
  }
}

function room() {
  try {
    const kept = localStorage.getItem(ROOM);
    return kept === null || !Number.isFinite(Number(kept)) ? null : Number(kept);
  } catch {
    return null;
  }
}

export function rememberImageNotes(json) {
  try {
    localStorage.setItem(NOTES, json);
  } catch {
    // (no storage: no note before Python is up)
  }
}

function imageNotes() {
  try {
    return JSON.parse(localStorage.getItem(NOTES) || "null");
  } catch {
    return null;
  }
}

// A size as a person reads it, as webapp/files.py's size_text writes it.
export function sizeText(size) {
  if (size < 1024) return `${size} bytes`;
  let value = size / 1024;
  let unit = "KB";
  for (const bigger of ["MB", "GB"]) {
    if (value < 1024) break;
    value /= 1024;
    unit = bigger;
  }
  return value < 10 ? `${value.toFixed(1)} ${unit}` : `${Math.round(value)} ${unit}`;
}

function element(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return template.content.firstElementChild;
}

// A chip as webapp/files.py draws it (composer_files), marked as the page's (data-early).
function chip(chat, { name, size, mime, url, width, height }, state) {
  const item = element('<li class="chip" data-early><span class="name"></span> <span class="size"></span></li>');
  item.dataset.chat = chat;
  item.dataset.bytes = String(size);
  item.dataset.mime = mime;
  item.querySelector(".name").textContent = name;
  item.querySelector(".size").textContent = sizeText(size);
  if (url) {
    const thumb = element('<span class="thumb"><img></span>');
    Object.assign(thumb.querySelector("img"), { alt: name, src: url });
    if (width && height) Object.assign(thumb.querySelector("img"), { width, height });
    item.prepend(thumb);
  }
  setState(item, name, state);
  return item;
}

function setState(item, name, state) {
  item.querySelector(".note")?.remove();
  item.querySelector("button")?.remove();
  item.classList.toggle("attaching", state === "attaching");
  if (state === "attaching") {
    item.append(" ", element('<span class="note">Attaching…</span>'));
    return;
  }
  const remove = element('<button type="button" class="remove" data-action="remove-early-file" title="Remove">×</button>');
  remove.setAttribute("aria-label", `Remove ${name}`);
  item.append(remove);
}

function refusal(chat, reason) {
  const item = element('<li class="chip refused" role="alert" data-early></li>');
  item.dataset.chat = chat;
  item.textContent = reason;
  return item;
}

function refuse(chat, reason) {
  byId("composer-files")?.append(refusal(chat, reason));
}

// The composer's chips that count towards a message's files (Python's and the page's).
function counted() {
  return [...(byId("composer-files")?.querySelectorAll(":scope > .chip:not(.refused):not(.warning)") ?? [])];
}

// The bytes of the files the page attached itself to the draft of `chat` (Python's room, kept
// at its last draw, counts those it had).
function attachedHere(chat) {
  return counted().filter((item) => item.hasAttribute("data-early") && item.dataset.chat === chat)
    .reduce((sum, item) => sum + (Number(item.dataset.bytes) || 0), 0);
}

function isImage(item) {
  if (item.dataset.mime !== undefined) return item.dataset.mime.startsWith("image/");
  try {
    return String(JSON.parse(item.dataset.attachment || "{}").mime ?? "").startsWith("image/");
  } catch {
    return false;
  }
}

// The composer's note when it has an image and the chooser's assistant does not read images, in
// Python's words (webapp/assistants.py: image_notes), drawn by the page while Python is not up.
export function drawImageNote() {
  const box = byId("composer-files");
  const notes = imageNotes();
  if (!box || !notes || host?.pythonUp()) return; // (never told: what was painted stays)
  box.querySelectorAll(":scope > .warning").forEach((item) => item.remove());
  const note = notes[byId("assistant-choice")?.value ?? ""];
  if (!note || !counted().some(isImage)) return;
  const item = element('<li class="chip warning" role="status" data-early></li>');
  item.dataset.chat = byId("composer-text")?.dataset.chat ?? "";
  item.textContent = note;
  box.append(item);
}

// Files picked, dropped or pasted into the composer of `chat` while Python is not up.
export function attach(chat, list) {
  const box = byId("composer-files");
  if (!box) return;
  box.querySelectorAll(":scope > .refused").forEach((item) => item.remove()); // (as Python: until the next attach)
  let have = counted().length;
  const known = room();
  let used = attachedHere(chat);
  for (const file of list) {
    const held = attachments.hold(file);
    if (held.size > limit()) {
      attachments.release(held.token);
      refuse(chat, `${held.name} is ${sizeText(held.size)}: the largest file the server takes is ${sizeText(limit())}.`);
      continue;
    }
    if (known !== null && held.size > known - used) { // (as webapp/files.py's room_refusal)
      attachments.release(held.token);
      const left = known - used > 0 ? `only ${sizeText(known - used)}` : "no room";
      refuse(chat, `${held.name} is ${sizeText(held.size)}: this account has ${left} left on the server for files (counting those not uploaded yet).`);
      continue;
    }
    if (have >= MAX_FILES) {
      attachments.release(held.token);
      refuse(chat, `${held.name} is not attached: a message takes at most ${MAX_FILES} files.`);
      continue;
    }
    have += 1;
    used += held.size;
    const name = held.name.slice(0, 255) || "file";
    const url = held.type.startsWith("image/") ? attachments.previewUrl(held.token) : "";
    const item = chip(chat, { name, size: held.size, mime: held.type, url }, "attaching");
    box.append(item);
    const job = { chat, held: { ...held, name }, ref: null, taken: false };
    job.done = chain.then(() => kept(job, item)); // (one at a time: the draft's files in the order attached)
    chain = job.done.catch((error) => console.error("not attached", error));
    jobs.set(item, job);
  }
  drawImageNote();
}

// Hashed, kept durably, then its reference in the draft (unless a Send took it meanwhile: the
// send carries it). Resolves to the reference, or null when the page could not hash it (then
// Python attaches it, from the held file, once it is up: webapp/files.py hashes it itself).
async function kept(job, item) {
  const { token, name, type, size } = job.held;
  let sha256;
  try {
    sha256 = await attachments.digest(token);
  } catch (error) {
    console.error("hashed by Python instead", error);
    item.remove();
    jobs.delete(item);
    host.dispatch("attach", { chat: job.chat, files: [job.held] }).catch(() => {});
    return null;
  }
  try {
    await attachments.keep(token, sha256); // (durable before anything names it)
  } catch (error) {
    console.error("not kept on this device", error);
    attachments.release(token);
    jobs.delete(item);
    item.replaceWith(refusal(job.chat, `${name} could not be kept on this device: attach it again.`));
    return null;
  }
  const [width, height] = type.startsWith("image/") ? await attachments.imageSize(token) : [];
  const url = attachments.heldUrl(token, sha256); // (the URL Python shows it with from now on)
  attachments.release(token);
  job.ref = { sha256, name, mime: type.slice(0, 255) || "application/octet-stream", size, ...(width ? { width, height } : {}) };
  if (job.taken) return job.ref;
  if (item.parentElement?.querySelector(`:scope > li [data-sha256="${sha256}"], :scope > li[data-sha256="${sha256}"]`)) {
    jobs.delete(item); // (attached already: kept once, where it was, as Python does)
    item.remove();
    return job.ref;
  }
  pending.keepFile(job.chat, job.ref);
  item.dataset.sha256 = sha256;
  if (!width) item.querySelector(".thumb")?.remove(); // (not an image this browser shows)
  else Object.assign(item.querySelector("img"), { width, height, src: url });
  await pending.whenKept();
  if (!job.taken) setState(item, name, "kept");
  return job.ref;
}

// Remove NAME on a chip the page drew, or on one of Python's while Python is not up: taken off
// at once, and off the draft Python adopts.
export function remove(button) {
  const item = button.closest("li");
  const chat = byId("composer-text")?.dataset.chat ?? "";
  const sha256 = button.dataset.sha256 || item.dataset.sha256;
  if (sha256) pending.removeFile(item.dataset.chat ?? chat, sha256);
  jobs.delete(item);
  item.remove();
  drawImageNote();
}

export function handles(button) {
  return button.dataset.action === "remove-early-file" || (button.dataset.action === "remove-file" && !host.pythonUp());
}

// A Send from the composer of `chat` (its draft): the files it takes. {files, all}: the
// references known now, and a promise of all of them (a file still being attached is hashed and
// kept first). Before Python is up, Python's own chips (painted from the render cache) go too,
// by the reference they carry; once it is up, Python adds its draft's files itself.
export function takeForSend(chat) {
  const taken = [];
  for (const item of byId("composer-files")?.querySelectorAll(":scope > li") ?? []) {
    const job = jobs.get(item);
    if (job && job.chat === chat) {
      job.taken = true;
      if (job.ref) pending.takeFile(chat, job.ref.sha256);
      taken.push(job.ref ?? job.done);
      jobs.delete(item);
      item.remove();
    } else if (!host.pythonUp() && item.dataset.attachment && !item.hasAttribute("data-early")) {
      const ref = JSON.parse(item.dataset.attachment);
      pending.removeFile(chat, ref.sha256);
      taken.push(ref);
      item.remove();
    } else if (item.hasAttribute("data-early") && item.classList.contains("refused")) {
      item.remove();
    }
  }
  drawImageNote(); // (the chips gone with the message, the note too)
  const known = taken.filter((ref) => ref && !(ref instanceof Promise));
  const all = Promise.all(taken).then((refs) => refs.filter(Boolean));
  return { files: known, waiting: known.length < taken.length, all };
}

// What the page kept at its last life, on the painted screen: its chips again (the draft's files
// it had, images from IndexedDB), Python's chips it took off hidden, and the images of the
// painted screen shown from IndexedDB (their object URLs died with the last page).
export async function restore(files) {
  const box = byId("composer-files");
  const chat = byId("composer-text")?.dataset.chat;
  const painted = [...document.querySelectorAll("#root [data-sha256]")];
  for (const entry of files) {
    if (!box || entry.chat !== chat) continue;
    const python = box.querySelector(`:scope > li:not([data-early]) [data-sha256="${entry.sha256}"]`)?.closest("li");
    if (entry.removed) python?.remove();
    else if (!python && !box.querySelector(`:scope > [data-early][data-sha256="${entry.sha256}"]`)) {
      const { sha256, name, size, mime, width, height } = entry.attachment;
      const url = width ? await attachments.keptUrl(sha256).catch(() => "") : "";
      const item = chip(chat, { name, size, mime, url, width, height }, "kept");
      item.dataset.sha256 = sha256;
      box.append(item);
    }
  }
  drawImageNote();
  for (const marked of painted) {
    const img = marked.closest("li")?.querySelector("img");
    if (img?.src.startsWith("blob:")) {
      const url = await attachments.keptUrl(marked.dataset.sha256).catch(() => "");
      if (url) img.src = url;
    }
  }
}

// Python's drawing of the composer's files (view.js: setHtml) keeps the chips the page drew for
// the chat the composer is in, but those Python now draws itself (the same file).
export function keepAcross(region, draw) {
  const chat = byId("composer-text")?.dataset.chat;
  const early = [...region.querySelectorAll(":scope > [data-early]:not(.warning)")].filter((item) => item.dataset.chat === chat);
  draw();
  for (const item of early) {
    const sha256 = item.dataset.sha256;
    if (sha256 && region.querySelector(`[data-sha256="${sha256}"]`)) {
      jobs.delete(item);
      continue;
    }
    region.append(item);
  }
}

// The file entries kept here, given to Python (one hand-over at a time; the next carries what
// changed meanwhile), then forgotten here once Python has them durably.
let handing = false;
let again = false;
async function handOver() {
  if (handing) {
    again = true;
    return;
  }
  handing = true;
  try {
    do {
      again = false;
      const { files } = await pending.read();
      if (!files.length) continue;
      await host.dispatch("adopt-files", { files: await withUrls(files) });
      await pending.forgetFiles(files.map((entry) => [entry.chat, entry.sha256, entry.at]));
    } while (again);
  } catch (error) {
    console.error("attached files not handed to Python", error); // (they stay here: adopted at the next start)
  } finally {
    handing = false;
  }
}

// Each entry with the object URL the page shows its file with, if it has one: Python shows it
// with the same (no image loaded twice, no flicker).
export async function withUrls(files) {
  return Promise.all(files.map(async (entry) => entry.removed ? entry : { ...entry, url: attachments.knownUrl(entry.sha256) }));
}

export function start(hostFunctions) {
  host = hostFunctions;
  pending.onFilesKept(() => host.pythonUp() && handOver());
}

// Python is up (it adopted what was kept at its start): what is kept from now on is handed over.
export function pythonStarted() {
  handOver();
}
