// A stand-in for the Web Locks API (navigator.locks) where the browser has none: a page that is not
// a secure context, such as the app opened over plain http:// from another device of the home
// network. static/app.js uses it only then. It offers the subset app.js uses, in exclusive mode:
//
//   request(name, callback)                     a short section: waits its turn, held while the
//                                               callback's promise is pending (the IO lock)
//   request(name, {ifAvailable: true}, callback) a lease, held for long (the owner lock): granted
//                                               now, or the callback gets null
//   request(name, {steal: true}, callback)      a lease taken from whoever holds it; their request
//                                               then rejects with an AbortError
//
// Each returns a promise of the callback's result, settled once the lock is released. A lease is
// released when its callback's promise settles (app.js never lets it) or its page goes.
//
// Everything lives in one IndexedDB object store ("locks" in the database "chat-locks"), and every
// operation on it is a readwrite transaction of that store, which IndexedDB runs one at a time
// across all the tabs of the origin, in the order they were created:
//
// - A section is a readwrite transaction kept open, by always having one request pending, for as
//   long as its callback runs. No other tab's section, nor any lease being granted, stolen,
//   renewed or released, can run meanwhile. A tab that dies mid-section (killed, crashed) loses
//   its connection, so the browser aborts the transaction: nothing stays locked.
// - A lease is a record {token, expires}, the token new for each grant. Its tab renews it every
//   second (expires: 4 s ahead) while it holds it and answers "ping"s about it on a
//   BroadcastChannel. Another tab may take it only if it is absent, marked released (below), or
//   its holder is gone: no "pong" and no renewal until the lease expired (at least 1 s). A tab
//   killed while holding a lease so frees it within about 4 s; a live holder whose timers are
//   throttled in the background still answers the ping, so it keeps its lease.
// - On pagehide a tab marks its leases released in localStorage (an IndexedDB write there is lost
//   on a reload; localStorage's is not), so a reload or a closed tab frees them at once. A page
//   brought back from the back/forward cache has lost them.
// - The fence: every grant (a section, a lease) first reads, in its own transaction, the records
//   of the leases this tab holds; one whose token is no longer this tab's was taken over, and its
//   request is rejected then, before the callback of the new grant runs (a later IndexedDB event,
//   so the rejection's handlers have run). A steal is seen otherwise too (a "taken" message, the
//   next renewal), but the fence does not depend on timing.
//
// Why this is safe for app.js: A owns the database (lease) and writes only in sections. B steals
// the lease: its transaction runs after A's current section, if any, has finished (A's write
// included, awaited inside the section). B then reads in a section of its own, after that. Any
// later section of A runs after B's steal, so its fence finds A's lease gone and rejects A's owner
// request first: app.js's `owner` is false and the section writes nothing. Timing (leases, pings,
// throttled timers) decides only who is asked to defer; never that two tabs write. localStorage is
// no use for the fence: another tab may read an older value of it for a while.
//
// Not supported: shared mode, `signal`, a lease and a section under one name, and a section
// requested from inside a section (its transaction would wait for the one it runs in).

const DB_NAME = "chat-locks";
const STORE = "locks";
const SECTION_KEY = "(section)"; // what a section's pending requests read (nothing is stored)
const RELEASED = "chat-locks-released:"; // + name, in localStorage: the token a closed page released
export const LEASE_MS = 4000;
const RENEW_MS = 1000;
const PING_MS = 1000;

const held = new Map(); // lease name -> {token, abort(error)}
const pongs = new Map(); // token -> callbacks waiting for its holder's answer
const kinds = new Map(); // name -> "lease" | "section", as this tab used it
let database = null;
let channel = null;
let renewing = null;
let leaving = false; // between pagehide and a pageshow from the back/forward cache

function newToken() {
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

function abortError(message) {
  return new DOMException(message, "AbortError");
}

function open() {
  database ||= new Promise((resolve, reject) => {
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE);
    req.onsuccess = () => {
      // Never closed by us (a section must not end before its callback); closed by the browser
      // only when the site's data is cleared: then nothing held can be trusted.
      req.result.onclose = () => {
        database = null;
        loseAll(abortError("the locks' database was closed"));
      };
      resolve(req.result);
    };
    req.onerror = () => {
      database = null;
      reject(req.error);
    };
  });
  listen();
  return database;
}

function post(message) {
  channel?.postMessage(message);
}

function listen() {
  if (channel) return;
  channel = new BroadcastChannel(DB_NAME);
  channel.onmessage = ({ data }) => {
    const lease = held.get(data.name);
    if (data.type === "ping" && lease?.token === data.token && !leaving) post({ type: "pong", token: data.token });
    else if (data.type === "pong") for (const answered of [...(pongs.get(data.token) ?? [])]) answered();
    else if (data.type === "taken" && lease && lease.token !== data.token) renew();
  };
  addEventListener("pagehide", () => {
    leaving = true;
    for (const [name, { token }] of held) {
      try {
        localStorage.setItem(RELEASED + name, token);
      } catch {
        // no localStorage: the lease expires instead
      }
      release(name, token).catch(() => {}); // (often lost when the page goes; the mark is not)
    }
  });
  addEventListener("pageshow", (event) => {
    if (!event.persisted) return;
    leaving = false;
    loseAll(abortError("the page was hidden: its locks were released"));
  });
  addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && held.size) renew(); // (timers were throttled)
  });
}

function released(name) {
  try {
    return localStorage.getItem(RELEASED + name);
  } catch {
    return null;
  }
}

// One readwrite transaction of the store, for a lease: body(store, out) places requests (their
// callbacks may place more). Resolves with `out` once it committed.
async function update(body) {
  const db = await open();
  return new Promise((resolve, reject) => {
    const tx = db.transaction(STORE, "readwrite", { durability: "relaxed" });
    const out = {};
    fence(tx.objectStore(STORE));
    body(tx.objectStore(STORE), out);
    tx.oncomplete = () => resolve(out);
    tx.onabort = () => reject(tx.error ?? abortError("a lock's transaction was aborted"));
  });
}

// The leases this tab holds that another has taken: their requests reject now.
function fence(store) {
  for (const [name, lease] of held) {
    const get = store.get(name);
    get.onsuccess = () => {
      if (get.result?.token !== lease.token) lose(name, lease, abortError(`the lock ${name} was taken by another tab`));
    };
  }
}

function lose(name, lease, error) {
  if (held.get(name) !== lease) return;
  held.delete(name);
  lease.abort(error);
  if (!held.size) {
    clearInterval(renewing);
    renewing = null;
  }
}

function loseAll(error) {
  for (const [name, lease] of held) lose(name, lease, error);
}

let renewal = null;
function renew() {
  renewal ||= update((store) => {
    for (const [name, lease] of held) {
      const get = store.get(name);
      get.onsuccess = () => {
        if (get.result?.token !== lease.token || leaving) return;
        store.put({ ...get.result, expires: Date.now() + LEASE_MS }, name);
      }; // (one taken over was lost by the fence, in this transaction)
    }
  })
    .catch((error) => loseAll(error)) // (renewals failing: no longer sure of anything held)
    .finally(() => {
      renewal = null;
    });
  return renewal;
}

function release(name, token) {
  return update((store) => {
    const get = store.get(name);
    get.onsuccess = () => {
      if (get.result?.token === token) store.delete(name);
    };
  });
}

// Whether the holder of `record` is alive: it answers a ping before the lease expires (waiting at
// least PING_MS, at most LEASE_MS whatever the clock says).
function answers(name, record) {
  return new Promise((resolve) => {
    const waiting = pongs.get(record.token) ?? [];
    pongs.set(record.token, waiting);
    const done = (alive) => {
      clearTimeout(timer);
      waiting.splice(waiting.indexOf(answered), 1);
      if (!waiting.length) pongs.delete(record.token);
      resolve(alive);
    };
    const answered = () => done(true);
    const timer = setTimeout(() => done(false), Math.min(Math.max(record.expires - Date.now(), PING_MS), LEASE_MS));
    waiting.push(answered);
    post({ type: "ping", name, token: record.token });
  });
}

async function requestLease(name, steal, callback) {
  const token = newToken();
  let suspect = null; // a record whose holder did not answer
  for (;;) {
    const { granted, record } = await update((store, out) => {
      const get = store.get(name);
      get.onsuccess = () => {
        const record = (out.record = get.result);
        const gone = suspect && record?.token === suspect.token && record.expires === suspect.expires;
        if (steal || !record || released(name) === record.token || gone) {
          store.put({ token, expires: Date.now() + LEASE_MS }, name);
          out.granted = true;
        }
      };
    });
    if (granted) break;
    const mine = held.get(name)?.token === record.token;
    const renewed = suspect && record.token === suspect.token; // (and expires moved: alive)
    if (mine || renewed || (await answers(name, record))) return callback(null);
    suspect = record; // (held by a tab that is gone, unless it renews meanwhile: read again)
  }
  const lease = { token, abort: null };
  const lost = new Promise((_, reject) => {
    lease.abort = reject;
  });
  lost.catch(() => {});
  const before = held.get(name);
  if (before) lose(name, before, abortError(`the lock ${name} was stolen`));
  held.set(name, lease);
  renewing ||= setInterval(renew, RENEW_MS);
  post({ type: "taken", name, token }); // (its holder, if alive, finds out now)
  try {
    return await Promise.race([Promise.resolve().then(() => callback({ name, mode: "exclusive" })), lost]);
  } finally {
    if (held.get(name) === lease) {
      lose(name, lease, abortError(`the lock ${name} was released`));
      await release(name, token).catch(() => {}); // (else it expires)
    }
  }
}

async function requestSection(name, callback) {
  const db = await open();
  return new Promise((resolve, reject) => {
    const tx = db.transaction(STORE, "readwrite", { durability: "relaxed" });
    const store = tx.objectStore(STORE);
    let result = null; // the callback's promise, once it is called
    let settled = false;
    fence(store);
    const pending = () => {
      if (!settled) store.get(SECTION_KEY).onsuccess = pending;
    };
    store.get(SECTION_KEY).onsuccess = () => {
      // (an event after the fence's: the leases it found lost have been rejected, and handled)
      result = Promise.resolve().then(() => callback({ name, mode: "exclusive" }));
      result.finally(() => (settled = true)).catch(() => {});
      pending();
    };
    tx.oncomplete = () => resolve(result);
    tx.onabort = () => {
      // Only the browser ends it early: what still runs may not be alone any more. Give up every
      // lease, and report the section failed once its callback is done.
      const error = tx.error ?? abortError(`the lock ${name} was lost`);
      loseAll(error);
      (result ?? Promise.resolve()).finally(() => reject(error)).catch(() => {});
    };
  });
}

export function request(name, options, callback) {
  if (callback === undefined) [options, callback] = [{}, options];
  const { ifAvailable = false, steal = false, mode = "exclusive", signal } = options;
  const kind = ifAvailable || steal ? "lease" : "section";
  if (mode !== "exclusive" || signal || (ifAvailable && steal) || (kinds.get(name) ?? kind) !== kind) {
    return Promise.reject(new DOMException("not supported by static/locks.js", "NotSupportedError"));
  }
  kinds.set(name, kind);
  return kind === "lease" ? requestLease(name, steal, callback) : requestSection(name, callback);
}
