// The bytes of attachments, which never go through Python's database or the event log: files
// picked, dropped or pasted are held here under a token while they are hashed (in a worker,
// static/hash-worker.js; webapp/files.py decides), then kept in IndexedDB under their SHA-256,
// durably, before a draft or a message refers to them. The upload engine sends them a chunk (a Blob slice) at a time, and
// a file another device sent is fetched from the server once and kept here, so it stays viewable
// offline. A Blob in IndexedDB is stored by the browser on disk, not in the page's memory.
//
// "Export everything" with files is a tar made here from the Blobs in IndexedDB (never read into
// memory), the same format as `python -m server export --with-files`: `chat-export.json`, then
// `files/<sha256>` per file; an import of such a tar holds its files (slices of the tar) under
// tokens, as if picked, for Python to hash, keep and queue for upload.
//
// An image is kept with a small thumbnail beside it (at most THUMB_PIXELS on its longer side,
// made once, while it is hashed, and added to its row when made): the chat and the composer show
// the thumbnail, the dialog the image.

const DB_NAME = "chat-attachments";
const THUMB_PIXELS = 480; // (shown at up to 240 CSS pixels: sharp at 2 device pixels to one)
const held = new Map(); // token -> File
const pictures = new Map(); // token -> a held image's thumbnail (a promise: decoded meanwhile)
const sizes = new Map(); // token -> a held image's [width, height] (a promise: its header read meanwhile)
const previews = new Map(); // token -> object URL of the held file, shown before it is hashed
const urls = new Map(); // sha256 -> object URL of what the page shows of it (one for the page's life)
let heldCount = 0;

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

let opened = null;
function database() {
  opened ||= new Promise((resolve, reject) => {
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => req.result.createObjectStore("files"); // sha256 -> {blob, name, type}
    req.onsuccess = () => {
      req.result.onversionchange = () => req.result.close(); // (site data being cleared)
      resolve(req.result);
    };
    req.onerror = () => reject(req.error);
  });
  return opened;
}

async function put(sha256, blob, thumb, durability) {
  const db = await database();
  const tx = db.transaction(["files"], "readwrite", { durability });
  tx.objectStore("files").put({ blob, type: blob.type, thumb }, sha256);
  await new Promise((resolve, reject) => {
    tx.oncomplete = resolve;
    tx.onerror = tx.onabort = () => reject(tx.error || new Error("IndexedDB transaction aborted"));
  });
}

async function record(sha256) {
  const db = await database();
  return (await request(db.transaction(["files"], "readonly").objectStore("files").get(sha256))) ?? null;
}

async function stored(sha256) {
  return (await record(sha256))?.blob ?? null;
}

// An image's size and its thumbnail (null when the image is small already: it is its own),
// decoded once, off the page's thread (createImageBitmap); null for what is not an image.
async function pictured(blob) {
  if (!blob.type.startsWith("image/")) return null;
  let bitmap;
  try {
    bitmap = await createImageBitmap(blob);
  } catch {
    return null; // (not an image this browser decodes)
  }
  const { width, height } = bitmap;
  bitmap.close();
  const scale = THUMB_PIXELS / Math.max(width, height);
  if (scale >= 1 && blob.size <= 256 * 1024) return { size: [width, height], thumb: null };
  const w = Math.max(1, Math.round(width * Math.min(1, scale)));
  const h = Math.max(1, Math.round(height * Math.min(1, scale)));
  const small = await createImageBitmap(blob, { resizeWidth: w, resizeHeight: h, resizeQuality: "medium" });
  const canvas = new OffscreenCanvas(w, h);
  canvas.getContext("2d").drawImage(small, 0, 0);
  small.close();
  return { size: [width, height], thumb: await canvas.convertToBlob({ type: "image/webp", quality: 0.85 }) };
}

// The object URL the page shows the kept file with (one for the page's life): its thumbnail, or
// the file itself. An image whose thumbnail was never made (the page went, a reload or a crash,
// between keeping the file and adding the thumbnail) has it made now, once.
async function shownUrl(sha256, found) {
  if (!urls.has(sha256)) {
    let thumb = found.thumb;
    if (thumb == null && found.blob.type.startsWith("image/")) {
      thumb = (await pictured(found.blob).catch(() => null))?.thumb || false;
      await addThumb(sha256, thumb).catch(() => {});
    }
    if (!urls.has(sha256)) urls.set(sha256, URL.createObjectURL(thumb || found.blob));
  }
  return urls.get(sha256);
}

// A File from the picker, a drop or a paste: held until Python has kept it (release).
// An image starts decoding at once (off the page's thread), beside Python's hashing.
export function hold(file) {
  const token = `f${++heldCount}`;
  held.set(token, file);
  if (file.type.startsWith("image/")) {
    sizes.set(token, measured(previewUrl(token)));
    pictures.set(token, pictured(file).catch(() => null));
  }
  return { token, name: file.name || "pasted", type: file.type, size: file.size };
}

// An image's width and height as the page shows it (its orientation applied), known once its
// header is read: an image element's load, which decodes no pixels. [] when it is not an image.
function measured(url) {
  return new Promise((resolve) => {
    const img = new Image();
    img.onload = () => resolve(img.naturalWidth ? [img.naturalWidth, img.naturalHeight] : []);
    img.onerror = () => resolve([]);
    img.src = url;
  });
}

export function previewUrl(token) {
  if (!previews.has(token)) previews.set(token, URL.createObjectURL(held.get(token)));
  return previews.get(token);
}

// The SHA-256 of the held file, hashed in a worker (static/hash-worker.js) as it is read.
let hasher = null;
const hashing = new Map(); // id -> {resolve, reject}
let hashCount = 0;

export function digest(token) {
  if (!hasher) {
    hasher = new Worker("/static/hash-worker.js");
    hasher.onmessage = ({ data }) => {
      const waiting = hashing.get(data.id);
      hashing.delete(data.id);
      if (data.error) waiting?.reject(new Error(data.error));
      else waiting?.resolve(data.sha256);
    };
    hasher.onerror = (event) => { // (the worker could not start: Python hashes instead)
      event.preventDefault();
      for (const waiting of hashing.values()) waiting.reject(new Error(event.message || "the hashing worker failed"));
      hashing.clear();
      hasher = null;
    };
  }
  const id = ++hashCount;
  return new Promise((resolve, reject) => {
    hashing.set(id, { resolve, reject });
    hasher.postMessage({ id, blob: held.get(token) });
  });
}

export async function slice(token, start, end) {
  return new Uint8Array(await held.get(token).slice(start, end).arrayBuffer());
}

// The file, durably; an image's thumbnail follows when it is made (the page shows the held file
// until a reload: the thumbnail is for later).
export async function keep(token, sha256) {
  const file = held.get(token);
  const blob = new Blob([file], { type: file.type });
  await put(sha256, blob, null, "strict");
  pictures.get(token)?.then((image) => addThumb(sha256, image?.thumb || false)).catch(() => {});
}

// A kept image's thumbnail, or false: none is needed (the image is small, or not one this browser
// decodes). A row's thumb is null until then.
async function addThumb(sha256, thumb) {
  const db = await database();
  const tx = db.transaction(["files"], "readwrite", { durability: "relaxed" });
  const store = tx.objectStore("files");
  const found = await request(store.get(sha256));
  if (found && found.thumb == null) store.put({ ...found, thumb }, sha256); // (gone: cleared meanwhile)
  await new Promise((resolve, reject) => {
    tx.oncomplete = resolve;
    tx.onerror = tx.onabort = () => reject(tx.error || new Error("IndexedDB transaction aborted"));
  });
}

// A held image's width and height ([] when it is not an image this browser decodes).
export async function imageSize(token) {
  return (await sizes.get(token)) ?? [];
}

export function heldUrl(token, sha256) {
  if (!urls.has(sha256)) urls.set(sha256, previewUrl(token));
  return urls.get(sha256);
}

export function release(token) {
  const url = previews.get(token);
  if (url && ![...urls.values()].includes(url)) URL.revokeObjectURL(url);
  held.delete(token);
  pictures.delete(token);
  sizes.delete(token);
  previews.delete(token);
}

// For the upload engine: the stored file's size (-1: not on this device), and its bytes. The
// engine asks the size as it starts a file, and the Blob it got then is the one its chunks are
// sliced from (an IndexedDB transaction a chunk cost 5-10 ms between chunks here).
let uploading = { sha256: "", blob: null };

export async function size(sha256) {
  const blob = await stored(sha256);
  uploading = { sha256, blob };
  return blob?.size ?? -1;
}

// A Blob of the bytes, not the bytes: fetch sends it from the browser's blob storage, and its
// bytes never come into the page's memory or Python's.
export async function read(sha256, offset, length) {
  return uploadingSlice(sha256, offset, length) ?? (await stored(sha256)).slice(offset, offset + length);
}

// The same at once (no promise, so no turn of Python's event loop to wait for), from the Blob of
// the file being uploaded; null for another file.
export function uploadingSlice(sha256, offset, length) {
  return uploading.sha256 === sha256 && uploading.blob ? uploading.blob.slice(offset, offset + length) : null;
}

// An upload's request (webapp/browser.py: _blob_send): XMLHttpRequest, whose upload events say
// how much of the body has gone (fetch says nothing of a body's progress), so a file goes in one
// request and its progress is still drawn. onProgress (or null) is told the bytes sent so far.
// Resolves to [status, the answer's headers as getAllResponseHeaders gives them, its text];
// rejects, as fetch does, when the request fails, and when nothing moved for stalledMs: neither
// a byte of the body went nor an answer came (a connection left half-open when a phone changed
// networks; the upload then goes on from the server's offset at its next try, as after any
// failure, where it would have waited for good).
export const STALLED_MS = 60000;
export function send(url, method, headers, body, onProgress, stalledMs = STALLED_MS) {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open(method, url);
    for (const [name, value] of Object.entries(headers)) request.setRequestHeader(name, value);
    let moved = performance.now();
    const watch = setInterval(() => {
      if (performance.now() - moved > stalledMs) request.abort();
    }, Math.min(1000, stalledMs / 4));
    request.upload.onprogress = (event) => {
      moved = performance.now();
      if (onProgress) onProgress(event.loaded);
    };
    request.onprogress = () => {
      moved = performance.now(); // (the answer coming)
    };
    const settled = () => {
      clearInterval(watch);
      request.upload.onprogress = request.onprogress = null; // (none after this: Python lets go of onProgress)
    };
    request.onload = () => {
      settled();
      resolve([request.status, request.getAllResponseHeaders(), request.responseText]);
    };
    request.onerror = request.onabort = request.ontimeout = () => {
      settled();
      reject(new TypeError("the request failed"));
    };
    request.send(body);
  });
}

// A file from the server: [status, its bytes as a Blob (null unless 200)]. Rejects when the
// request fails, and, as send, when nothing moved for stalledMs: no answer, or no byte of its
// body (a connection left half-open), where it would have waited for good. The body is kept as
// Blobs of up to a MiB as it comes, so the page's own memory holds one piece at a time.
async function fetched(url, stalledMs) {
  const controller = new AbortController();
  let moved = performance.now();
  const watch = setInterval(() => {
    if (performance.now() - moved > stalledMs) controller.abort();
  }, Math.min(1000, stalledMs / 4));
  try {
    const response = await fetch(url, { credentials: "same-origin", signal: controller.signal });
    if (response.status !== 200) return [response.status, null];
    const reader = response.body.getReader();
    const parts = [];
    let pieces = [];
    let held = 0;
    for (;;) {
      const { done, value } = await reader.read();
      moved = performance.now();
      if (value) {
        pieces.push(value);
        held += value.byteLength;
      }
      if (held >= PIECE_BYTES || (done && pieces.length)) {
        parts.push(new Blob(pieces));
        pieces = [];
        held = 0;
      }
      if (done) break;
    }
    return [200, new Blob(parts, { type: response.headers.get("Content-Type") ?? "" })];
  } finally {
    clearInterval(watch);
  }
}
const PIECE_BYTES = 1 << 20;

// An object URL of what the page shows of the file (an image's thumbnail; the file itself),
// from IndexedDB, or fetched from the server and kept there first: [url, ""], or ["", "missing"]
// (the server does not have it: not uploaded yet), or ["", "offline"] (asked again later).
// (Strings only: Python reads them as they are.)
export async function want(sha256, stalledMs = STALLED_MS) {
  if (urls.has(sha256)) return [urls.get(sha256), ""];
  let found = await record(sha256);
  if (!found) {
    let status, blob;
    try {
      [status, blob] = await fetched(`/blobs/${sha256}`, stalledMs);
    } catch {
      return ["", "offline"];
    }
    if (status === 404) return ["", "missing"];
    if (!blob) return ["", "offline"];
    found = { blob, thumb: (await pictured(blob).catch(() => null))?.thumb || false };
    await put(sha256, blob, found.thumb, "relaxed"); // (the server has it: a copy, kept for offline use)
  }
  return [await shownUrl(sha256, found), ""];
}

// What the page shows of a kept file from this device's IndexedDB alone (no network): an object
// URL, or "" when it is not here. For the screen painted before Python (static/early-files.js).
export async function keptUrl(sha256) {
  if (urls.has(sha256)) return urls.get(sha256);
  const found = await record(sha256);
  return found ? await shownUrl(sha256, found) : "";
}

// The object URL the page shows a file with already, or "".
export function knownUrl(sha256) {
  return urls.get(sha256) ?? "";
}

// The bytes of a kept file (a number most: no more than its first most), for a model on this
// device (webapp/files.py: read), fetched from the server and kept first if this device does not
// have it; null when they cannot be had.
export async function bytesOf(sha256, most) {
  let blob = await stored(sha256);
  if (!blob && !(await want(sha256))[1]) blob = await stored(sha256);
  if (blob && typeof most === "number") blob = blob.slice(0, most);
  return blob ? new Uint8Array(await blob.arrayBuffer()) : null;
}

// An object URL of the whole file (an image at full size, for its dialog); "" if not here.
const fullUrls = new Map();
export async function full(sha256) {
  if (!fullUrls.has(sha256)) {
    const blob = await stored(sha256);
    if (!blob) return "";
    fullUrls.set(sha256, URL.createObjectURL(blob));
  }
  return fullUrls.get(sha256);
}

// Everything kept here, for an account about to be replaced or removed from this browser.
export async function clearAll() {
  const db = await database();
  const tx = db.transaction(["files"], "readwrite", { durability: "strict" });
  tx.objectStore("files").clear();
  for (const url of [...urls.values(), ...fullUrls.values()]) URL.revokeObjectURL(url);
  urls.clear();
  fullUrls.clear();
}

// --- exports with files (the tar of `python -m server export --with-files`) ---------------------

const EXPORT_MEMBER = "chat-export.json";
const FILES = "files/";

function tarHeader(name, size, mtime) {
  const header = new Uint8Array(512);
  const put = (text, start) => header.set(new TextEncoder().encode(text), start);
  const octal = (value, width) => value.toString(8).padStart(width - 1, "0") + "\0";
  put(name, 0);
  put(octal(0o644, 8), 100);
  put(octal(0, 8), 108);
  put(octal(0, 8), 116);
  put(octal(size, 12), 124);
  put(octal(mtime, 12), 136);
  put("        ", 148); // (the checksum counts its own field as spaces)
  header[156] = 48; // "0": a regular file
  put("ustar\0" + "00", 257);
  put(octal(header.reduce((sum, byte) => sum + byte, 0), 7) + " ", 148);
  return header;
}

// Offer the export as a tar to save: its JSON, then each file of `digests` this device has (or
// fetches from the server, keeping it). Returns the digests left out (on no device we can reach).
export async function exportFile(filename, text, digests) {
  const parts = [];
  const mtime = Math.floor(Date.now() / 1000);
  const add = (name, blob) => parts.push(tarHeader(name, blob.size, mtime), blob, new Uint8Array((512 - (blob.size % 512)) % 512));
  add(EXPORT_MEMBER, new Blob([text]));
  const left = [];
  for (const sha256 of digests) {
    let blob = await stored(sha256);
    if (!blob && !(await want(sha256))[1]) blob = await stored(sha256);
    if (blob) add(FILES + sha256, blob);
    else left.push(sha256);
  }
  parts.push(new Uint8Array(1024)); // (the tar's end: two empty blocks)
  const url = URL.createObjectURL(new Blob(parts, { type: "application/x-tar" }));
  const link = Object.assign(document.createElement("a"), { href: url, download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
  return left;
}

// A file chosen to import: {text, files}, the export's JSON and, from a tar, its files held
// under tokens ({token, sha256, size} each: a slice of the tar, its bytes not read here).
export async function readExport(file) {
  const head = new Uint8Array(await file.slice(0, 512).arrayBuffer());
  if (new TextDecoder().decode(head.subarray(257, 262)) !== "ustar") return { text: await file.text(), files: [] };
  let text = "";
  let longName = null; // (a pax header's path, for the member after it)
  const files = [];
  for (let offset = 0; offset + 512 <= file.size; ) {
    const header = new Uint8Array(await file.slice(offset, offset + 512).arrayBuffer());
    if (header.every((byte) => byte === 0)) break;
    const field = (start, length) => new TextDecoder().decode(header.subarray(start, start + length)).replace(/\0[\s\S]*$/, "");
    const prefix = field(345, 155);
    const name = longName ?? (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100));
    const size = parseInt(field(124, 12).trim() || "0", 8);
    const type = header[156] ? String.fromCharCode(header[156]) : "0";
    const body = file.slice(offset + 512, offset + 512 + size);
    longName = null;
    if (type === "x") longName = / path=([^\n]*)\n/.exec(await body.text())?.[1] ?? null;
    else if (type === "0" && name === EXPORT_MEMBER) text = await body.text();
    else if (type === "0" && name.startsWith(FILES)) files.push({ token: hold(body).token, sha256: name.slice(FILES.length), size });
    offset += 512 + Math.ceil(size / 512) * 512;
  }
  return { text, files };
}
