// Load generator for bench_fanout.py: holds N live sockets in Node.js (cheaper per socket than a
// Python client, so the figures are the server's) and times each event from the start of its
// POST to its frame on every socket, after a few events to warm up.
// usage: node fanout_client.mjs <base url> <tokens JSON> <sockets> <events>
import { createRequire } from "node:module";
const require = createRequire(process.env.WS_MODULE_DIR + "/");
const WebSocket = require("ws");

const [base, tokensJson, count, events] = process.argv.slice(2);
const tokens = JSON.parse(tokensJson);
const wsUrl = base.replace("http://", "ws://") + "/sync/live?afterSeq=0";

function open(i) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl, { headers: { Authorization: `Bearer ${tokens[i % tokens.length]}` } });
    ws.on("error", reject);
    ws.on("message", function first(data) {
      if (JSON.parse(data).type === "caughtUp") { ws.off("message", first); resolve(ws); }
    });
  });
}

const sockets = [];
for (let i = 0; i < Number(count); i += 200) {
  const batch = [];
  for (let j = i; j < Math.min(Number(count), i + 200); j++) batch.push(open(j));
  sockets.push(...(await Promise.all(batch)));
}

const WARM_UP = 3; // events whose figures are not kept: first connections, first runs of each path
const latencies = [];
for (let n = -WARM_UP; n < Number(events); n++) {
  const chat = crypto.randomUUID();
  const body = { events: [{ eventId: crypto.randomUUID(), type: "ChatCreated", createdAt: "2026-11-30T12:00:00Z",
    payload: { id: chat, title: "fan-out", createdAt: "2026-11-30T12:00:00Z" } }] };
  const arrivals = sockets.map((ws) => new Promise((resolve) => {
    ws.on("message", function seen(data) {
      const frame = JSON.parse(data);
      if (frame.type === "event" && frame.event.payload.id === chat) {
        ws.off("message", seen);
        resolve(performance.now() - started);
      }
    });
  }));
  const started = performance.now();
  const posted = fetch(base + "/sync/events", { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${tokens[0]}` } });
  const arrived = await Promise.all(arrivals);
  if (n >= 0) latencies.push(...arrived);
  await posted;
  await new Promise((r) => setTimeout(r, 50));
}
for (const ws of sockets) ws.close();
latencies.sort((a, b) => a - b);
console.log(JSON.stringify({ p50: latencies[Math.floor(latencies.length / 2)], p99: latencies[Math.floor(latencies.length * 0.99) - 1] }));
