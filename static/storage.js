// The local database's files in IndexedDB, as 64 KiB chunks, so that a durable commit writes only
// what changed (the new end of the -wal file; at a checkpoint, the chunks holding the pages it
// rewrote), whatever the size of the database. webapp/chunks.py says which chunks; each write
// is one readwrite transaction with strict durability, chunks and file sizes together, so what
// IndexedDB holds is always a state SQLite committed. At start-up the files are read back into
// Pyodide's in-memory file system before Python opens the database.

const DB_NAME = "chat-files";
export const CHUNK = 65536;

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

function done(tx) {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = tx.onabort = () => reject(tx.error || new Error("IndexedDB transaction aborted"));
  });
}

function open() {
  const req = indexedDB.open(DB_NAME, 1);
  req.onupgradeneeded = () => {
    req.result.createObjectStore("chunks"); // [file name, chunk index] -> Uint8Array
    req.result.createObjectStore("sizes"); // file name -> bytes
  };
  return request(req).then((opened) => {
    // Someone deletes the database (the user clearing site data): let them.
    opened.onversionchange = () => opened.close();
    return opened;
  });
}

let db = null;

// Reads every stored file: {name: bytes} (empty the first time). It needs no Pyodide, so that it
// runs while Python starts.
export async function read() {
  db = await open();
  const tx = db.transaction(["chunks", "sizes"], "readonly");
  const [names, sizes] = await Promise.all([
    request(tx.objectStore("sizes").getAllKeys()),
    request(tx.objectStore("sizes").getAll()),
  ]);
  const files = {};
  await Promise.all(names.map(async (name, i) => {
    const range = IDBKeyRange.bound([name, 0], [name, Infinity]);
    const [keys, chunks] = await Promise.all([
      request(tx.objectStore("chunks").getAllKeys(range)),
      request(tx.objectStore("chunks").getAll(range)),
    ]);
    const file = new Uint8Array(sizes[i]);
    for (const [j, [, index]] of keys.entries()) {
      const start = index * CHUNK;
      if (start < file.length) file.set(chunks[j].subarray(0, file.length - start), start);
    }
    files[name] = file;
  }));
  return files;
}

// Puts what read() found into `dir` of Pyodide's FS. Returns {name: size} of what was stored.
export async function install(pyodide, dir, files) {
  const stored = {};
  for (const [name, file] of Object.entries(files)) {
    pyodide.FS.writeFile(`${dir}/${name}`, file);
    stored[name] = file.length;
  }
  return stored;
}

// writes: [[file name, [chunk index, ...]], ...]; the sizes of those files go with them. The bytes
// are read now, when Python asks (the files as that commit left them), and stored later, in
// order: a write queued behind another must not store what a later commit or checkpoint made of
// the files, or a crash between the two could leave a state SQLite never committed.
export function capture(pyodide, dir, writes) {
  return writes.map(([name, indexes]) => {
    const path = `${dir}/${name}`;
    const size = pyodide.FS.analyzePath(path).exists ? pyodide.FS.stat(path).size : 0;
    const chunks = [];
    if (indexes.length) {
      const stream = pyodide.FS.open(path, "r");
      try {
        for (const index of indexes) {
          const start = index * CHUNK;
          const chunk = new Uint8Array(Math.max(0, Math.min(CHUNK, size - start)));
          pyodide.FS.read(stream, chunk, 0, chunk.length, start);
          chunks.push([index, chunk]);
        }
      } finally {
        pyodide.FS.close(stream);
      }
    }
    return { name, size, chunks };
  });
}

// Stores what capture() read: chunks and sizes in one strict readwrite transaction.
export async function write(captured) {
  const tx = db.transaction(["chunks", "sizes"], "readwrite", { durability: "strict" });
  for (const { name, size, chunks } of captured) {
    tx.objectStore("sizes").put(size, name);
    for (const [index, chunk] of chunks) tx.objectStore("chunks").put(chunk, [name, index]);
  }
  await done(tx);
}
