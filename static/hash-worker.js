// Hashing attachments off the page's thread (static/files.js: digest): the SHA-256 of a held file
// the page posts (a File or Blob: a reference, not a copy), read a slice at a time, so no more
// than a slice of it is ever in memory here, and hashed as it is read by hash-wasm's SHA-256
// (WebAssembly, incremental; vendored by scripts/setup and served from our origin).
importScripts("/static/vendor/hash-wasm/4.13.0/sha256.umd.min.js");

const SLICE_BYTES = 4 * 1024 * 1024;

self.onmessage = async (event) => {
  const { id, blob } = event.data;
  try {
    const hasher = await self.hashwasm.createSHA256();
    hasher.init();
    let next = blob.slice(0, SLICE_BYTES).arrayBuffer();
    for (let start = 0; start < blob.size; start += SLICE_BYTES) {
      const bytes = new Uint8Array(await next);
      next = blob.slice(start + SLICE_BYTES, start + 2 * SLICE_BYTES).arrayBuffer(); // (read while this one is hashed)
      hasher.update(bytes);
    }
    self.postMessage({ id, sha256: hasher.digest("hex") });
  } catch (error) {
    self.postMessage({ id, error: String(error) });
  }
};
