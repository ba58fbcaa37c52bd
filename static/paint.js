// Paint before Python: the screen the app last drew for the account signed in here (the chat list
// and the open chat, kept by static/view.js in localStorage), put on the page before anything else
// loads. A classic script at the end of <body>, so it runs before the first paint. Python takes
// over this DOM as it is (webapp/app.py: Client.start) when its layout is the same; what is typed
// into the composer meanwhile is kept and saved as the chat's draft (static/app.js).
//
// Only the account named by "chat-render-current" is painted; the app clears it before any other
// account can sign in here, and whenever the page shows a sign-in (view.js: remember).
(() => {
  let cache;
  try {
    const account = localStorage.getItem("chat-render-current");
    if (!account) return;
    cache = JSON.parse(localStorage.getItem(`chat-render:${account}`) || "null");
    if (!cache || cache.account !== account) return;
  } catch {
    return; // no storage (a private window may refuse it) or a damaged entry: the app draws
  }
  document.getElementById("root").innerHTML = cache.html;
  // What was typed last (static/pending.js keeps it in localStorage until IndexedDB has it, and
  // static/app.js reads IndexedDB's copy next): newer than the screen's copy.
  let text = cache.text;
  try {
    const typed = JSON.parse(localStorage.getItem(`chat-draft:${cache.chat}`) || "null");
    if (typed) text = typed.text;
  } catch {
    // (a damaged entry: IndexedDB's copy follows)
  }
  const box = document.getElementById("composer-text");
  if (box) box.value = text;
  const scroller = document.getElementById("scroller");
  if (scroller) scroller.scrollTop = scroller.scrollHeight; // an open chat starts at its latest
  globalThis.chatPainted = { account: cache.account, layout: cache.layout, chat: cache.chat, text };
  performance.mark("chat:painted");
})();
