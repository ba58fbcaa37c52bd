// The bytes of attachments, which never go through Python's database or the event log: files
// picked, dropped or pasted are held here under a token while Python hashes them (a slice at a
// time: webapp/files.py), then kept in IndexedDB under their SHA-256, durably, before a draft or
// a message refers to them. The upload engine sends them a chunk (a Blob slice) at a time, and
// a file another device sent is fetched from the server once and kept here, so it stays viewable
// offline. A Blob in IndexedDB is stored by the browser on disk, not in the page's memory.
//
// An image is kept with a small thumbnail beside it (at most THUMB_PIXELS on its longer side,
// made once when it is kept): the chat and the composer show the thumbnail, the dialog the image.

const DB_NAME = "chat-attachments";
const THUMB_PIXELS = 480; // (shown at up to 240 CSS pixels: sharp at 2 device pixels to one)
const held = new Map(); // token -> File
const sizes = new Map(); // token -> [width, height] of a held image, once decoded
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

function shownUrl(sha256, found) {
  if (!urls.has(sha256)) urls.set(sha256, URL.createObjectURL(found.thumb || found.blob));
  return urls.get(sha256);
}

// A File from the picker, a drop or a paste: held until Python has kept it (release).
export function hold(file) {
  const token = `f${++heldCount}`;
  held.set(token, file);
  return { token, name: file.name || "pasted", type: file.type, size: file.size };
}

export async function slice(token, start, end) {
  return new Uint8Array(await held.get(token).slice(start, end).arrayBuffer());
}

export async function keep(token, sha256) {
  const file = held.get(token);
  const blob = new Blob([file], { type: file.type });
  const image = await pictured(blob).catch(() => null);
  if (image) sizes.set(token, image.size);
  await put(sha256, blob, image?.thumb ?? null, "strict");
  if (image?.thumb && !urls.has(sha256)) urls.set(sha256, URL.createObjectURL(image.thumb));
}

// A held image's width and height ([] when it is not an image this browser decodes).
export async function imageSize(token) {
  return sizes.get(token) ?? [];
}

export function heldUrl(token, sha256) {
  if (!urls.has(sha256)) urls.set(sha256, URL.createObjectURL(held.get(token)));
  return urls.get(sha256);
}

export function release(token) {
  held.delete(token);
  sizes.delete(token);
}

// For the upload engine: the stored file's size (-1: not on this device), and its bytes.
export async function size(sha256) {
  return (await stored(sha256))?.size ?? -1;
}

// A Blob of the bytes, not the bytes: fetch sends it from the browser's blob storage, and its
// bytes never come into the page's memory or Python's.
export async function read(sha256, offset, length) {
  return (await stored(sha256)).slice(offset, offset + length);
}

// An object URL of what the page shows of the file (an image's thumbnail; the file itself),
// from IndexedDB, or fetched from the server and kept there first: [url, ""], or ["", "missing"]
// (the server does not have it: not uploaded yet), or ["", "offline"]. (Strings only: Python
// reads them as they are.)
export async function want(sha256) {
  if (urls.has(sha256)) return [urls.get(sha256), ""];
  let found = await record(sha256);
  if (!found) {
    let response;
    try {
      response = await fetch(`/blobs/${sha256}`, { credentials: "same-origin" });
    } catch {
      return ["", "offline"];
    }
    if (response.status === 404) return ["", "missing"];
    if (!response.ok) return ["", "offline"];
    const blob = await response.blob();
    found = { blob, thumb: (await pictured(blob).catch(() => null))?.thumb ?? null };
    await put(sha256, blob, found.thumb, "relaxed"); // (the server has it: a copy, kept for offline use)
  }
  return [shownUrl(sha256, found), ""];
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
