"""The chat server: Quart on Hypercorn, the event store, live fan-out, static assets."""
