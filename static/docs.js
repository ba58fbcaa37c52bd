// The API docs page (/docs): the operations of /openapi.json, listed.
const spec = await (await fetch("/openapi.json")).json();
const root = document.getElementById("paths");
for (const [path, ops] of Object.entries(spec.paths)) {
  for (const [method, op] of Object.entries(ops)) {
    const section = document.createElement("section");
    const title = document.createElement("h2");
    title.innerHTML = `<code>${method.toUpperCase()} ${path}</code>`;
    const summary = document.createElement("p");
    summary.textContent = op.summary || "";
    const list = document.createElement("ul");
    for (const p of op.parameters || []) {
      const item = document.createElement("li");
      item.innerHTML = `<code>${p.name}</code> `;
      item.append(p.description || "");
      list.append(item);
    }
    for (const [code, r] of Object.entries(op.responses)) {
      const item = document.createElement("li");
      item.innerHTML = `<code>${code}</code> `;
      item.append(r.description);
      list.append(item);
    }
    section.append(title, summary, list);
    root.append(section);
  }
}
