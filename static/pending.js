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
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => {
      req.result.createObjectStore("drafts"); // chat -> {text, at}
      req.result.createObjectStore("sends"); // id -> {id, chat, newChat, text, assistant, at}
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
let writing = null; // the transaction under way

function flushSoon() {
  if (!writing) writing = flush();
}

async function flush() {
  while (drafts.size || sends.size) {
    const draftsNow = new Map(drafts);
    const sendsNow = new Map(sends);
    drafts.clear();
    sends.clear();
    try {
      const db = await database();
      const tx = db.transaction(["drafts", "sends"], "readwrite", { durability: "strict" });
      for (const [chat, entry] of draftsNow) tx.objectStore("drafts").put(entry, chat);
      for (const [id, send] of sendsNow) {
        if (send) tx.objectStore("sends").put(send, id);
        else tx.objectStore("sends").delete(id);
      }
      await new Promise((resolve, reject) => {
        tx.oncomplete = resolve;
        tx.onerror = tx.onabort = () => reject(tx.error || new Error("IndexedDB transaction aborted"));
      });
    } catch (error) {
      console.error("not kept on this device", error);
      for (const [chat, entry] of draftsNow) if (!drafts.has(chat)) drafts.set(chat, entry);
      for (const [id, send] of sendsNow) if (!sends.has(id)) sends.set(id, send);
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
  }
  writing = null;
  document.body.dataset.drafts = "saved";
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

// A message sent from the composer: {id, chat, newChat, text, assistant}, kept until forgetSend.
export function keepSend(send) {
  const kept = { ...send, at: stamp() };
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

// Everything kept here, for an account about to be replaced or removed from this browser.
export async function clearAll() {
  drafts.clear();
  sends.clear();
  local(() => {
    for (const key of Object.keys(localStorage)) {
      if (key.startsWith(DRAFT) || key.startsWith(SEND)) localStorage.removeItem(key);
    }
  });
  const db = await database();
  const tx = db.transaction(["drafts", "sends"], "readwrite", { durability: "strict" });
  tx.objectStore("drafts").clear();
  tx.objectStore("sends").clear();
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

// Everything kept: {drafts: {chat: {text, at}}, sends: [send, oldest first]}, the newest copy of
// each (localStorage's is newer when IndexedDB has not got it yet).
export async function read() {
  const found = readLocal();
  try {
    const db = await database();
    const tx = db.transaction(["drafts", "sends"], "readonly");
    const [chats, entries, sent] = await Promise.all([
      request(tx.objectStore("drafts").getAllKeys()),
      request(tx.objectStore("drafts").getAll()),
      request(tx.objectStore("sends").getAll()),
    ]);
    chats.forEach((chat, i) => {
      if (!(found.drafts[chat]?.at >= entries[i].at)) found.drafts[chat] = entries[i];
    });
    for (const send of sent) found.sends[send.id] ||= send;
  } catch (error) {
    console.error("what this page kept could not be read", error);
  }
  for (const [id, send] of sends) { // (not written yet)
    if (send) found.sends[id] = send;
    else delete found.sends[id];
  }
  for (const [chat, entry] of drafts) found.drafts[chat] = entry;
  for (const entry of Object.values(found.drafts)) clock = Math.max(clock, entry.at);
  return { drafts: found.drafts, sends: Object.values(found.sends).sort((a, b) => a.at - b.at) };
}
