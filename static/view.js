// The page's DOM work, called from Python (webapp/browser.py: DomView). Python says what each
// region holds; this file changes only what differs: message items by key (a node whose HTML did
// not change is never touched), the rest morphed in place with idiomorph, so focus, selection and
// what is typed in the composer survive every redraw.
//
// Scrolling like a chat: an open chat starts at its latest message; while the reader is at the
// bottom, new messages and streaming text keep them there; once they scroll up nothing moves
// (the first message in view stays where it is) and "Jump to latest" appears.
import { Idiomorph } from "/static/vendor/idiomorph/0.8.0/idiomorph.esm.js";
import * as earlyFiles from "/static/early-files.js";
import * as pending from "/static/pending.js";

const NEAR_BOTTOM = 24; // px: this close to the end still counts as reading the latest
let follow = true;
let ownTop = null; // where our own last scroll put the scroller (its scroll event is not the reader's)

function scrollTo(scroller, top) {
  scroller.scrollTop = top;
  ownTop = scroller.scrollTop;
}

const byId = (id) => document.getElementById(id);

export function setHtml(region, html) {
  const element = byId(region);
  if (!element) return;
  // (The chips of files the page is attaching itself stay, static/early-files.js.)
  if (region === "composer-files") earlyFiles.keepAcross(element, () => { element.innerHTML = html; });
  else element.innerHTML = html;
}

export function morph(region, html) {
  const element = byId(region);
  if (element) Idiomorph.morph(element, parsed(html), { morphStyle: "innerHTML" });
}

// HTML as nodes, parsed in a template (inert: nothing in it loads or runs until it is put in the
// page), for idiomorph to morph to. Given a string, idiomorph parses it with a DOMParser, which
// makes a Document each time: 5 ms a patch on the loaded VM (a Chrome trace's Document::Document).
function parsed(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return template.content;
}

const fromHtml = (html) => parsed(html).firstElementChild;

const atBottom = (scroller) => scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight <= NEAR_BOTTOM;

// The first message the reader sees, and where: kept there while things change around it.
function anchorOf(scroller, list) {
  const top = scroller.getBoundingClientRect().top;
  for (const element of list.children) {
    const box = element.getBoundingClientRect();
    if (box.bottom > top) return { element, offset: box.top - top };
  }
  return null;
}

function keepAnchor(scroller, anchor) {
  if (!anchor.element.isConnected) return;
  const moved = anchor.element.getBoundingClientRect().top - scroller.getBoundingClientRect().top - anchor.offset;
  if (moved) scrollTo(scroller, scroller.scrollTop + moved);
}

function showJump(scroller) {
  const jump = byId("jump");
  if (jump) jump.hidden = follow || atBottom(scroller);
}

// A streaming reply's content: its first `kept` elements (blocks that no longer change) stay, the
// rest is replaced by `html`.
function streamInto(item, kept, html) {
  const content = item?.querySelector(".content");
  if (!content) return;
  let last = kept > 0 ? content.children[kept - 1] : null;
  if (last?.nextSibling?.nodeType === Node.TEXT_NODE && !last.nextSibling.textContent.trim()) last = last.nextSibling;
  while (content.lastChild && content.lastChild !== last) content.lastChild.remove();
  content.insertAdjacentHTML("beforeend", html);
}

// {order: [key] | null, changed: {key: html}, opened: bool, earlier: bool, streams: {key: [kept, html]}}
export function patchMessages(json) {
  const { order, changed, opened, earlier, streams } = JSON.parse(json);
  const list = byId("messages");
  const scroller = byId("scroller");
  if (!list || !scroller) return;
  const anchor = follow || opened ? null : anchorOf(scroller, list);
  // Messages the page drew itself as they were sent (showSending) stay, last, until Python
  // draws them: the message is in Python's database only a moment later.
  const sending = [...list.querySelectorAll(":scope > [data-sending]")]
    .filter((element) => element.dataset.chat === byId("composer-text")?.dataset.chat);
  if (opened) {
    list.replaceChildren();
    follow = true;
  }
  const byKey = new Map();
  for (const element of list.children) byKey.set(element.id, element);
  for (const element of sending) byKey.set(element.id, element);
  if (order === null) {
    for (const [key, html] of Object.entries(changed)) {
      const element = byKey.get(key);
      if (element) Idiomorph.morph(element, fromHtml(html));
    }
  } else {
    let next = list.firstElementChild;
    for (const key of order) {
      let element = byKey.get(key);
      if (element === undefined) {
        element = fromHtml(changed[key]);
      } else {
        byKey.delete(key);
        if (key in changed) Idiomorph.morph(element, fromHtml(changed[key]));
      }
      if (element === next) next = next.nextElementSibling;
      else list.insertBefore(element, next);
    }
    for (const element of byKey.values()) {
      if (sending.includes(element)) list.append(element);
      else element.remove();
    }
    byId("earlier").hidden = !earlier;
  }
  for (const [key, [kept, html]] of Object.entries(streams)) streamInto(byId(key), kept, html);
  if (follow) scrollTo(scroller, scroller.scrollHeight);
  else if (anchor) keepAnchor(scroller, anchor);
  showJump(scroller);
}

// {chat, text: string | null, note: html | null}: the composer writes in `chat`; `note` is shown
// while it edits a message (then its text is not the draft). `text` replaces what it holds, but
// never what was typed since into the same chat's draft: a chat drawn again keeps what is typed.
let composerSet = null; // what the last call put there: {box, chat, text, editing}
export function setComposer(json) {
  const { chat, text, note } = JSON.parse(json);
  const box = byId("composer-text");
  if (!box) return;
  const editing = note !== null;
  const typed = composerSet !== null && composerSet.box === box && composerSet.chat === chat
    && !composerSet.editing && !editing && box.value !== composerSet.text; // (a new sign-in: a new box)
  box.dataset.chat = chat;
  box.toggleAttribute("data-draft", !editing);
  // (The text this call set last, unchanged: fitted then, and measuring it would lay the page out.)
  const same = composerSet !== null && composerSet.box === box && composerSet.text === text && box.value === text;
  if (text !== null && !typed && !same) {
    box.value = text;
    fitComposer(box);
  }
  // (typed into: it stays so until the app sets another chat or an edit, whatever it sets here)
  composerSet = { box, chat, text: typed ? composerSet.text : box.value, editing };
  const shown = byId("composer-note");
  shown.hidden = note === null;
  shown.innerHTML = note ?? "";
  byId("assistant-choice").hidden = note !== null;
}

// A message just sent from the composer, drawn by the page itself at once (whatever Python is
// doing; before it has started, or while it is busy): {id, chat, text}, as "Saving on this
// device…". Python's own drawing of the message, a moment later, morphs this node in place.
export function showSending({ id, chat, text }, files = []) {
  const list = byId("messages");
  if (!list || byId(`m-${id}`) || byId("composer-text")?.dataset.chat !== chat) return;
  const item = fromHtml(`<li class="message user pending" data-state="saving" data-sending>
    <div class="bubble"><div class="content"><div class="plain"></div></div></div>
    <p class="state">Saving on this device…</p><div class="meta"></div></li>`);
  item.id = `m-${id}`;
  item.dataset.chat = chat;
  item.querySelector(".plain").textContent = text;
  if (files.length) { // (as the composer's chips showed them: an image from its URL, else its name)
    const shown = fromHtml('<ul class="files" aria-label="Attachments"></ul>');
    for (const { name, src } of files) {
      // (The elements Python draws, webapp/files.py: message_files, so that its drawing morphs
      // them in place and the image is not loaded again; opened once Python has it.)
      const file = fromHtml(src
        ? '<li class="file image"><button type="button" class="thumb" data-action="view-image" disabled><img></button></li>'
        : '<li class="file"><span class="name"></span></li>');
      if (src) {
        Object.assign(file.querySelector("img"), { src, alt: name });
        file.querySelector("button").setAttribute("aria-label", `Open ${name}`);
      } else file.querySelector(".name").textContent = name;
      shown.append(file);
    }
    item.querySelector(".bubble").prepend(shown);
  }
  list.append(item);
  const scroller = byId("scroller");
  follow = true;
  scrollTo(scroller, scroller.scrollHeight);
  showJump(scroller);
}

// Python has the message: its next drawing of the list morphs the page's drawing of it in place,
// or removes it, should Python not draw the message under this id (refused by the server by then,
// or deleted: a refused one is drawn under its event's id).
export function sendingTaken(id) {
  byId(`m-${id}`)?.removeAttribute("data-sending");
}

// Python did not take it (it refused the message, or could not save it): the page's drawing goes.
export function endSending(id) {
  const item = byId(`m-${id}`);
  if (item?.hasAttribute("data-sending")) item.remove();
}

// Text put back into the composer (a message that could not be saved): kept as the draft, as
// if typed, unless something was typed there since.
export function restoreText(selector, text) {
  const box = document.querySelector(selector);
  if (!box || box.value) return;
  box.value = text;
  box.dispatchEvent(new Event("input", { bubbles: true }));
}

// A message the app could not take (a chat's queue full, a failed save), its text given back as
// the draft of the chat it was written in: before what was typed there since it was sent, which
// stays (`draft`: that chat's draft as Python has it, for a chat the composer does not show), so
// neither is lost; nothing if the draft holds it already.
export function putBack(chat, text, draft) {
  const box = byId("composer-text");
  const shown = box?.dataset.chat === chat && box.hasAttribute("data-draft"); // (not while editing a message)
  const now = shown ? box.value : draft;
  if (!text || now.includes(text)) return;
  const merged = now.trim() ? `${text}\n${now}` : text;
  if (!shown) {
    pending.keepDraft(chat, merged); // (durable, then handed to Python as any draft)
    return;
  }
  box.value = merged;
  box.dispatchEvent(new Event("input", { bubbles: true })); // (kept and fitted as if typed)
}

// The page sent the composer's message in no chat: the message makes chat `chat` (Python makes it
// with that id), and what is typed from now on is that chat's, as if the app had set it there.
export function composeIn(chat) {
  const box = byId("composer-text");
  if (!box) return;
  box.dataset.chat = chat;
  composerSet = { box, chat, text: "", editing: false };
}

// The composer grows with its text, up to a limit set in CSS (max-height), then scrolls.
export function fitComposer(box) {
  box.style.height = "auto";
  box.style.height = `${box.scrollHeight + box.offsetHeight - box.clientHeight}px`;
}

export async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // No clipboard API (a page served over plain HTTP): the old way.
    const scratch = Object.assign(document.createElement("textarea"), { value: text });
    document.body.append(scratch);
    scratch.select();
    document.execCommand("copy");
    scratch.remove();
  }
  button.dataset.copied = "true";
  setTimeout(() => delete button.dataset.copied, 1500);
}

// A search result: the reader goes to this message (it stays there: no following the latest).
export function reveal(key) {
  const element = byId(key);
  const scroller = byId("scroller");
  if (!element || !scroller) return;
  follow = false;
  element.scrollIntoView({ block: "center" });
  ownTop = scroller.scrollTop;
  element.dataset.found = "true";
  element.tabIndex = -1;
  element.focus({ preventScroll: true });
  setTimeout(() => delete element.dataset.found, 2000);
  showJump(scroller);
}

// The chat list on a narrow screen is a drawer over the chat: open, closed, or the other way (null).
export function toggleChats(open) {
  const root = byId("root");
  const shown = open ?? root.dataset.drawer !== "open";
  if (shown) root.dataset.drawer = "open";
  else delete root.dataset.drawer;
  document.querySelectorAll("button[data-action=toggle-chats]").forEach((b) => b.setAttribute("aria-expanded", String(shown)));
}

// A file to save (an export), made here: nothing goes over the network.
export function download(filename, type, text) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = Object.assign(document.createElement("a"), { href: url, download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// A field of instructions counts its characters as they are typed (`data-count`: the counter's id).
export function countInto(box) {
  const counter = byId(box.dataset.count);
  if (counter) counter.textContent = `${box.value.length.toLocaleString("en")} / ${Number(box.maxLength).toLocaleString("en")}`;
}

// A <dialog> Python has drawn (Settings): opened modal; Escape or its Close button closes it.
export function showDialog(id) {
  const dialog = byId(id);
  if (dialog && !dialog.open) dialog.showModal();
}

export function jumpToLatest() {
  const scroller = byId("scroller");
  if (!scroller) return;
  follow = true;
  scrollTo(scroller, scroller.scrollHeight);
  showJump(scroller);
}

// Listeners that live as long as the page (the scroller itself is drawn anew at each sign-in).
// The reader leaves the latest only by scrolling up themselves (wheel, touch, keys, scroll bar);
// scrolls of our own, or the browser's when the scroller changes size, never count as leaving.
// Back at the bottom by a scroll not our own, they follow again.
export function wire() {
  const scroller = () => byId("scroller");
  const leave = () => { // (the browser may have scrolled already: a passive listener runs after)
    const element = scroller();
    if (element && element.scrollHeight > element.clientHeight) follow = false;
  };
  const inScroller = (event) => event.target instanceof Node && scroller()?.contains(event.target);
  document.addEventListener("wheel", (e) => { if (e.deltaY < 0 && inScroller(e)) leave(); }, { passive: true });
  let touchY = null;
  document.addEventListener("touchstart", (e) => { touchY = inScroller(e) ? e.touches[0].clientY : null; }, { passive: true });
  document.addEventListener("touchmove", (e) => {
    if (touchY !== null && e.touches[0].clientY > touchY) leave();
  }, { passive: true });
  document.addEventListener("keydown", (e) => {
    if (["PageUp", "ArrowUp", "Home"].includes(e.key) && inScroller(e)) leave();
  });
  document.addEventListener("mousedown", (e) => { if (e.target === scroller()) leave(); }); // its scroll bar
  document.addEventListener(
    "scroll",
    (event) => {
      if (event.target.id !== "scroller") return;
      if (event.target.scrollTop !== ownTop && atBottom(event.target)) follow = true;
      showJump(event.target);
    },
    { capture: true, passive: true },
  );
  // The scroller shrinks when the composer grows or the window changes: the latest stays in view.
  const resized = new ResizeObserver((entries) => {
    for (const entry of entries) if (follow) scrollTo(entry.target, entry.target.scrollHeight);
  });
  const watch = () => {
    const element = scroller();
    if (element && !element.dataset.watched) {
      element.dataset.watched = "true";
      resized.observe(element);
    }
  };
  new MutationObserver(watch).observe(byId("root"), { childList: true });
  watch(); // (a screen painted from the render cache is there already)
  watchScreen();
}

// The render cache (static/paint.js paints it at the next start, before Python): the screen as
// Python last drew it for `account`, saved in localStorage a moment after it stops changing and
// whenever the page is hidden. `layout` names the layout Python drew (webapp/app.py takes the
// painted DOM over only when it would draw the same one). remember(null) forgets every cache:
// nothing is painted until an account has drawn its screen again.
const RENDER_CURRENT = "chat-render-current";
const RENDER = "chat-render:";
const SAVE_AFTER_MS = 1000;
let remembered = null; // {account, layout}
let saveTimer = null;

export function remember(account, layout) {
  try {
    for (const key of Object.keys(localStorage)) {
      if (key.startsWith(RENDER) && key !== RENDER + account) localStorage.removeItem(key);
    }
    if (account) localStorage.setItem(RENDER_CURRENT, account);
    else localStorage.removeItem(RENDER_CURRENT);
    if (!account) pending.clearAll().catch((e) => console.error("drafts not cleared", e));
  } catch {
    return; // no storage: nothing is painted early, the app still works
  }
  remembered = account ? { account, layout } : null;
  if (remembered) saveSoon();
}

function saveSoon() {
  clearTimeout(saveTimer);
  saveTimer = remembered ? setTimeout(saveScreen, SAVE_AFTER_MS) : null;
}

// What is on screen now, without what belongs to this moment only: a question asked in the
// session banner or the chat's header, the drawer, a message being edited.
export function saveScreen() {
  clearTimeout(saveTimer);
  const box = byId("composer-text");
  if (!remembered || !box) return; // not the chats (a sign-in, or the chats are open in another tab)
  // (Copied into a document with no window: a copy in this one would load its images again.)
  const copy = document.implementation.createHTMLDocument("").importNode(byId("root"), true);
  copy.querySelector("#session")?.replaceChildren();
  copy.querySelector("#scroller")?.removeAttribute("data-watched"); // (the next page watches it anew)
  copy.querySelectorAll("#chat-head [role=alertdialog], #chat-head form").forEach((element) => element.remove());
  const note = copy.querySelector("#composer-note");
  note?.replaceChildren();
  note?.setAttribute("hidden", "");
  copy.querySelector("#assistant-choice")?.removeAttribute("hidden");
  copy.querySelector("#jump")?.setAttribute("hidden", "");
  copy.querySelectorAll("dialog").forEach((dialog) => dialog.removeAttribute("open")); // (a dialog is this moment's)
  copy.querySelector("#settings-body")?.replaceChildren();
  copy.querySelectorAll("[data-sending]").forEach((element) => element.remove()); // (static/pending.js has them)
  // (So has it the files the page attached itself; a file being attached, or refused, is this moment's.)
  copy.querySelectorAll("#composer-files > [data-early], #composer-files > .attaching, #composer-files > .refused")
    .forEach((element) => element.remove());
  const editing = !box.hasAttribute("data-draft");
  copy.querySelector("#composer-text")?.setAttribute("data-draft", "");
  // (A size the page set, the composer's height: painted back it would be inline style, which the
  // Content Security Policy refuses. The page fits the composer again once it is up.)
  copy.querySelectorAll("[style]").forEach((element) => element.removeAttribute("style"));
  const record = {
    account: remembered.account,
    layout: remembered.layout,
    chat: box.dataset.chat,
    text: editing ? "" : box.value,
    html: copy.innerHTML,
  };
  try {
    localStorage.setItem(RENDER + record.account, JSON.stringify(record));
  } catch {
    localStorage.removeItem(RENDER + record.account); // (over the quota: better none than a stale one)
  }
}

// If the page shows the render cache of `account` drawn with `layout`, the id of the chat it shows
// ("" for none), and the composer's text counts as set by the app (what is typed from now on is
// the user's, kept by setComposer); otherwise undefined (None in Python: it draws the page anew).
export function cached(account, layout) {
  const painted = globalThis.chatPainted;
  globalThis.chatPainted = null;
  const box = byId("composer-text");
  if (!painted || painted.account !== account || painted.layout !== layout || !box) return undefined;
  composerSet = { box, chat: painted.chat, text: painted.text, editing: false };
  return painted.chat;
}

function watchScreen() {
  new MutationObserver(() => remembered && saveSoon())
    .observe(byId("root"), { childList: true, subtree: true, characterData: true, attributes: true });
  document.addEventListener("visibilitychange", () => document.visibilityState === "hidden" && saveScreen());
  window.addEventListener("pagehide", saveScreen);
}
