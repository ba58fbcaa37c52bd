// The bytes of attachments, which never go through Python's database or the event log: files
// picked, dropped or pasted are held here under a token while Python hashes them (a slice at a
// time: webapp/files.py), then kept in IndexedDB under their SHA-256, durably, before a draft or
// a message refers to them. The upload engine reads them back a chunk at a time (read/size), and
// a file another device sent is fetched from the server once and kept here, so it stays viewable
// offline. A Blob in IndexedDB is stored by the browser on disk, not in the page's memory.

const DB_NAME = "chat-attachments";
const held = new Map(); // token -> File
const urls = new Map(); // sha256 -> object URL (one per file for the page's life)
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

async function put(sha256, blob, durability) {
  const db = await database();
  const tx = db.transaction(["files"], "readwrite", { durability });
  tx.objectStore("files").put({ blob, type: blob.type }, sha256);
  await new Promise((resolve, reject) => {
    tx.oncomplete = resolve;
    tx.onerror = tx.onabort = () => reject(tx.error || new Error("IndexedDB transaction aborted"));
  });
}

async function stored(sha256) {
  const db = await database();
  return (await request(db.transaction(["files"], "readonly").objectStore("files").get(sha256)))?.blob ?? null;
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
  await put(sha256, new Blob([file], { type: file.type }), "strict");
}

export async function imageSize(token) {
  try {
    const bitmap = await createImageBitmap(held.get(token));
    const size = [bitmap.width, bitmap.height];
    bitmap.close();
    return size;
  } catch {
    return []; // (not an image this browser decodes)
  }
}

export function heldUrl(token, sha256) {
  if (!urls.has(sha256)) urls.set(sha256, URL.createObjectURL(held.get(token)));
  return urls.get(sha256);
}

export function release(token) {
  held.delete(token);
}

// For the upload engine: the stored file's size (-1: not on this device), and its bytes.
export async function size(sha256) {
  return (await stored(sha256))?.size ?? -1;
}

export async function read(sha256, offset, length) {
  const blob = await stored(sha256);
  return new Uint8Array(await blob.slice(offset, offset + length).arrayBuffer());
}

// An object URL of the file, from IndexedDB, or fetched from the server and kept there first:
// [url, ""], or ["", "missing"] (the server does not have it: not uploaded yet), or
// ["", "offline"]. (Strings only: Python reads them as they are.)
export async function want(sha256) {
  if (urls.has(sha256)) return [urls.get(sha256), ""];
  let blob = await stored(sha256);
  if (!blob) {
    let response;
    try {
      response = await fetch(`/blobs/${sha256}`, { credentials: "same-origin" });
    } catch {
      return ["", "offline"];
    }
    if (response.status === 404) return ["", "missing"];
    if (!response.ok) return ["", "offline"];
    blob = await response.blob();
    await put(sha256, blob, "relaxed"); // (the server has it: a copy, kept for offline use)
  }
  if (!urls.has(sha256)) urls.set(sha256, URL.createObjectURL(blob));
  return [urls.get(sha256), ""];
}

// Everything kept here, for an account about to be replaced or removed from this browser.
export async function clearAll() {
  const db = await database();
  const tx = db.transaction(["files"], "readwrite", { durability: "strict" });
  tx.objectStore("files").clear();
  for (const url of urls.values()) URL.revokeObjectURL(url);
  urls.clear();
}
