// What the page keeps itself, without waiting for Python: the composer's text at every keystroke
// (per chat) and each message sent from the composer until Python has it in the local database.
// A phone can be busy for seconds (Python starting, a sync page being stored): nothing typed may
// wait for it.
//
// Each change is written twice: at once into localStorage (synchronous, so a reload the next
// millisecond finds it), then into IndexedDB in one strict transaction (durable on disk, so a
// browser killed a moment later finds it; localStorage reaches the disk only later). Once
// IndexedDB has an entry, its localStorage copy goes. Writes are coalesced: one transaction at a
// time, the next carrying everything changed meanwhile.
//
// body[data-drafts] says where the drafts stand: "saving", then "saved" once everything typed is
// durable (or "failed"). Python reads all of it at start (read()) before it draws the composer,
// and adopts it into its database (webapp/app.py: Client.adopt_drafts and the sends it is given).
//
// Files attached before Python is up (static/early-files.js) are kept here too, by reference
// only (their bytes are in static/files.js's IndexedDB first): the draft's files the page added,
// and those it took off ({removed: true}), per chat, in IndexedDB only (the bytes cannot be in
// localStorage: a reference there would outlive them), in the same transactions as the drafts
// and the sends, until Python has adopted them (Client.adopt_draft_files). A send carries its
// files itself; a file entry older than a kept send of its chat that carries the same file is
// that send's, not the draft's.

const DB_NAME = "chat-pending";
const DRAFT = "chat-draft:"; // localStorage: DRAFT + chat -> {text, at}
const SEND = "chat-send:"; // localStorage: SEND + id -> a send

let clock = 0;
const stamp = () => (clock = Math.max(Date.now(), clock + 1)); // strictly increasing

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

let opened = null;
function database() {
  opened ||= new Promise((resolve, reject) => {
    const req = indexedDB.open(DB_NAME, 2);
    req.onupgradeneeded = (event) => {
      if (event.oldVersion < 1) {
        req.result.createObjectStore("drafts"); // chat -> {text, at}
        req.result.createObjectStore("sends"); // id -> {id, chat, newChat, text, assistant, files?, at}
      }
      // fileKey(chat, sha256) -> {chat, sha256, attachment, at} or {chat, sha256, removed: true, at}
      if (event.oldVersion < 2) req.result.createObjectStore("files");
    };
    req.onsuccess = () => {
      req.result.onversionchange = () => req.result.close(); // (site data being cleared)
      resolve(req.result);
    };
    req.onerror = () => reject(req.error);
  });
  return opened;
}

function local(action) {
  try {
    return action();
  } catch {
    return undefined; // no storage (a private window may refuse it): IndexedDB still has it
  }
}

function parsed(key) {
  return local(() => JSON.parse(localStorage.getItem(key) || "null"));
}

// --- writes --------------------------------------------------------------------------------------

const drafts = new Map(); // chat -> {text, at}: to write
const sends = new Map(); // id -> send, or null to delete
const files = new Map(); // fileKey -> a file entry, or null to delete
let writing = null; // the transaction under way
let waiting = []; // resolved once what was changed before they came is durable (whenKept)
const STORES = ["drafts", "sends", "files"];

const fileKey = (chat, sha256) => `${chat} ${sha256}`;

function flushSoon() {
  if (!writing) writing = flush();
}

async function flush() {
  while (drafts.size || sends.size || files.size) {
    const draftsNow = new Map(drafts);
    const sendsNow = new Map(sends);
    const filesNow = new Map(files);
    const waitingNow = waiting;
    drafts.clear();
    sends.clear();
    files.clear();
    waiting = [];
    try {
      const db = await database();
      const tx = db.transaction(STORES, "readwrite", { durability: "strict" });
      for (const [chat, entry] of draftsNow) tx.objectStore("drafts").put(entry, chat);
      for (const [id, send] of sendsNow) {
        if (send) tx.objectStore("sends").put(send, id);
        else tx.objectStore("sends").delete(id);
      }
      for (const [key, entry] of filesNow) {
        if (entry) tx.objectStore("files").put(entry, key);
        else tx.objectStore("files").delete(key);
      }
      await new Promise((resolve, reject) => {
        tx.oncomplete = resolve;
        tx.onerror = tx.onabort = () => reject(tx.error || new Error("IndexedDB transaction aborted"));
      });
    } catch (error) {
      console.error("not kept on this device", error);
      for (const [chat, entry] of draftsNow) if (!drafts.has(chat)) drafts.set(chat, entry);
      for (const [id, send] of sendsNow) if (!sends.has(id)) sends.set(id, send);
      for (const [key, entry] of filesNow) if (!files.has(key)) files.set(key, entry);
      waiting = [...waitingNow, ...waiting];
      document.body.dataset.drafts = "failed";
      writing = null;
      setTimeout(flushSoon, 1000); // (localStorage has it meanwhile)
      return;
    }
    // IndexedDB has them: their localStorage copies go, unless changed since.
    for (const [chat, entry] of draftsNow) {
      if (parsed(DRAFT + chat)?.at === entry.at) local(() => localStorage.removeItem(DRAFT + chat));
      for (const listener of draftListeners) listener(chat, entry);
    }
    for (const [id, send] of sendsNow) if (send) local(() => localStorage.removeItem(SEND + id));
    for (const resolve of waitingNow) resolve();
    if (filesNow.size) for (const listener of fileListeners) listener();
  }
  writing = null;
  document.body.dataset.drafts = "saved";
  for (const resolve of waiting.splice(0)) resolve(); // (asked for during the last transaction: nothing is left)
}

const draftListeners = [];
// listener(chat, {text, at}) once a draft is durable here (the page then hands it to Python).
export function onDraftKept(listener) {
  draftListeners.push(listener);
}

// The composer's text for `chat`, as typed now.
export function keepDraft(chat, text) {
  const entry = { text, at: stamp() };
  local(() => localStorage.setItem(DRAFT + chat, JSON.stringify(entry)));
  drafts.set(chat, entry);
  document.body.dataset.drafts = "saving";
  flushSoon();
  return entry;
}

// A message sent from the composer: {id, chat, newChat, text, assistant, files?}, kept until
// forgetSend. (Kept again with the same id, it replaces the first, in its place.)
export function keepSend(send) {
  const kept = { ...send, at: send.at ?? stamp() };
  local(() => localStorage.setItem(SEND + send.id, JSON.stringify(kept)));
  sends.set(send.id, kept);
  flushSoon();
  return kept;
}

// Python has the message in its database, durably.
export function forgetSend(id) {
  local(() => localStorage.removeItem(SEND + id));
  sends.set(id, null);
  flushSoon();
}

// Python has adopted these drafts ({chat: at}): the ones not changed since, and empty or of no
// chat it knows (`gone`), are removed; the others stay, the newest copy of what was typed.
export async function forgetDrafts(gone) {
  const db = await database();
  const tx = db.transaction(["drafts"], "readwrite", { durability: "strict" });
  const store = tx.objectStore("drafts");
  for (const [chat, at] of Object.entries(gone)) {
    if (drafts.has(chat)) continue; // typed again meanwhile
    const entry = await request(store.get(chat));
    if (entry?.at === at) store.delete(chat);
  }
}

const fileListeners = [];
// listener() once file entries are durable here (the page then hands them to Python).
export function onFilesKept(listener) {
  fileListeners.push(listener);
}

// Resolves once everything changed before the call is durable here.
export function whenKept() {
  if (!writing && !drafts.size && !sends.size && !files.size) return Promise.resolve();
  return new Promise((resolve) => {
    waiting.push(resolve);
    flushSoon();
  });
}

// A file attached to the draft of `chat`: {sha256, name, mime, size, width?, height?}, its bytes
// durable in static/files.js's IndexedDB already.
export function keepFile(chat, attachment) {
  const entry = { chat, sha256: attachment.sha256, attachment, at: stamp() };
  files.set(fileKey(chat, attachment.sha256), entry);
  flushSoon();
  return entry;
}

// A file taken off the draft of `chat` (Python's, or one kept here): Python takes it off too.
export function removeFile(chat, sha256) {
  files.set(fileKey(chat, sha256), { chat, sha256, removed: true, at: stamp() });
  flushSoon();
}

// A file kept here that went with a message (the send carries it): no longer the draft's.
export function takeFile(chat, sha256) {
  files.set(fileKey(chat, sha256), null);
  flushSoon();
}

// Python has adopted these file entries ([[chat, sha256, at]]): those not changed since go.
export async function forgetFiles(gone) {
  const db = await database();
  const tx = db.transaction(["files"], "readwrite", { durability: "strict" });
  const store = tx.objectStore("files");
  for (const [chat, sha256, at] of gone) {
    const key = fileKey(chat, sha256);
    if (files.has(key)) continue; // (changed again meanwhile)
    const entry = await request(store.get(key));
    if (entry?.at === at) store.delete(key);
  }
}

// Everything kept here, for an account about to be replaced or removed from this browser.
export async function clearAll() {
  drafts.clear();
  sends.clear();
  files.clear();
  local(() => {
    for (const key of Object.keys(localStorage)) {
      if (key.startsWith(DRAFT) || key.startsWith(SEND)) localStorage.removeItem(key);
    }
  });
  const db = await database();
  const tx = db.transaction(STORES, "readwrite", { durability: "strict" });
  for (const store of STORES) tx.objectStore(store).clear();
}

// --- reads ---------------------------------------------------------------------------------------

// The drafts and sends localStorage holds (synchronous: for the first paint).
export function readLocal() {
  const found = { drafts: {}, sends: {} };
  local(() => {
    for (const key of Object.keys(localStorage)) {
      if (key.startsWith(DRAFT)) found.drafts[key.slice(DRAFT.length)] = parsed(key);
      if (key.startsWith(SEND)) found.sends[key.slice(SEND.length)] = parsed(key);
    }
  });
  return found;
}

// Everything kept: {drafts: {chat: {text, at}}, sends: [send, oldest first], files: [file entry,
// oldest first]}, the newest copy of each (localStorage's is newer when IndexedDB has not got it
// yet); a file entry a later send carries is left out (see above).
export async function read() {
  const found = readLocal();
  let kept = [];
  try {
    const db = await database();
    const tx = db.transaction(STORES, "readonly");
    const [chats, entries, sent, fileEntries] = await Promise.all([
      request(tx.objectStore("drafts").getAllKeys()),
      request(tx.objectStore("drafts").getAll()),
      request(tx.objectStore("sends").getAll()),
      request(tx.objectStore("files").getAll()),
    ]);
    chats.forEach((chat, i) => {
      if (!(found.drafts[chat]?.at >= entries[i].at)) found.drafts[chat] = entries[i];
    });
    for (const send of sent) found.sends[send.id] ||= send;
    kept = fileEntries;
  } catch (error) {
    console.error("what this page kept could not be read", error);
  }
  for (const [id, send] of sends) { // (not written yet)
    if (send) found.sends[id] = send;
    else delete found.sends[id];
  }
  for (const [chat, entry] of drafts) found.drafts[chat] = entry;
  const byKey = new Map(kept.map((entry) => [fileKey(entry.chat, entry.sha256), entry]));
  for (const [key, entry] of files) {
    if (entry) byKey.set(key, entry);
    else byKey.delete(key);
  }
  const sent = Object.values(found.sends).sort((a, b) => a.at - b.at);
  const taken = (entry) => sent.some((send) => send.at > entry.at && (send.newChat ? "" : send.chat) === entry.chat
    && (send.files ?? []).some((file) => file.sha256 === entry.sha256));
  const fileEntries = [...byKey.values()].filter((entry) => entry.removed || !taken(entry)).sort((a, b) => a.at - b.at);
  for (const entry of [...Object.values(found.drafts), ...sent, ...fileEntries]) clock = Math.max(clock, entry?.at ?? 0);
  return { drafts: found.drafts, sends: sent, files: fileEntries };
}
