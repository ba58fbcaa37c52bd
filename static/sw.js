// Service worker: precache everything the app needs to open with no network, versioned by the
// server from the files' contents (server/assets.py fills in the two placeholders below).
// The precache goes through the HTTP cache (no `cache: "reload"`): the page registers this worker
// once it has started, so on a first visit the versioned vendor files are there already (immutable:
// no request at all) and the others revalidate with a 304; every file crosses the wire once. A
// file that changed is no-cache, so its revalidation brings the new one.
const VERSION = "__VERSION__";
const CACHE = `chat-${VERSION}`;
const PRECACHE = __PRECACHE__;

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(PRECACHE)));
  // No skipWaiting here: a running page keeps its version until the user reloads into the new one.
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches.keys()
      .then((keys) => Promise.all(keys.filter((k) => k.startsWith("chat-") && k !== CACHE).map((k) => caches.delete(k))))
      .then(() => self.clients.claim()),
  );
});

self.addEventListener("message", (event) => {
  if (event.data === "skipWaiting") self.skipWaiting();
});

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== location.origin) return;
  // The API and the live socket always go to the network.
  if (url.pathname.startsWith("/sync/") || url.pathname.startsWith("/auth/") || url.pathname === "/assistants") return;
  // The app is the page at "/"; the other pages (the API docs, /help/...) come from the network.
  if (event.request.mode === "navigate" && url.pathname !== "/") return;
  const key = event.request.mode === "navigate" ? "/" : event.request;
  event.respondWith(
    caches.open(CACHE).then((cache) => cache.match(key, { ignoreSearch: event.request.mode === "navigate" }))
      .then((hit) => hit || fetch(event.request)),
  );
});
