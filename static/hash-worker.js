// Hashing attachments off the page's thread (static/files.js: digest): the SHA-256 of a held file
// the page posts (a File or Blob: a reference, not a copy), read into one buffer a slice at a
// time, so no more than a slice of it is ever in memory here, and hashed as it is read by hash-wasm's SHA-256
// (WebAssembly, incremental; vendored by scripts/setup and served from our origin).
importScripts("/static/vendor/hash-wasm/4.13.0/sha256.umd.min.js");

const SLICE_BYTES = 4 * 1024 * 1024;

self.onmessage = async (event) => {
  const { id, blob } = event.data;
  try {
    const hasher = await self.hashwasm.createSHA256();
    hasher.init();
    // Read into one buffer, again and again (a byte stream's own reader): the file's bytes pass
    // through SLICE_BYTES of memory, not as many new buffers as it has slices.
    const reader = blob.stream().getReader({ mode: "byob" });
    let buffer = new ArrayBuffer(SLICE_BYTES);
    for (;;) {
      const { done, value } = await reader.read(new Uint8Array(buffer));
      if (done) break;
      hasher.update(value);
      buffer = value.buffer;
    }
    self.postMessage({ id, sha256: hasher.digest("hex") });
  } catch (error) {
    self.postMessage({ id, error: String(error) });
  }
};
