"""The browser's globals that webapp/browser.py uses, the page's own among them (static/app.js sets
``chatHost`` and ``chatView``, the exports of static/view.js). Pyodide converts JavaScript's
strings, numbers, booleans and null (and undefined) to Python's; anything else stays a JsProxy.
Only what is used is declared: a name used there and missing here is a type error, on purpose."""

from collections.abc import Awaitable, Iterable

from pyodide.ffi import JsProxy

# --- the page's own (static/app.js, static/view.js) ---------------------------------------------

class _ChatHost:
    stored: str  # JSON: {file name: size} of what IndexedDB held at start-up
    def persist(self, writes: str, /) -> Awaitable[object]: ...
    def runPython(self, code: str, seconds: float, /) -> Awaitable[object]: ...
    def drafts(self) -> Awaitable[str]: ...
    def forgetDrafts(self, gone: str, /) -> Awaitable[None]: ...

class _ChatView:
    def setHtml(self, region: str, html: str, /) -> None: ...
    def morph(self, region: str, html: str, /) -> None: ...
    def patchMessages(self, json: str, /) -> None: ...
    def setComposer(self, json: str, /) -> None: ...
    def restoreText(self, selector: str, text: str, /) -> None: ...
    def reveal(self, key: str, /) -> None: ...
    def toggleChats(self, open: bool | None, /) -> None: ...
    def download(self, filename: str, type: str, text: str, /) -> None: ...
    def remember(self, account: str | None, layout: str, /) -> None: ...
    def cached(self, account: str, layout: str, /) -> str | None: ...

chatHost: _ChatHost
chatView: _ChatView

# --- the platform's ----------------------------------------------------------------------------

class _GlobalThis:
    def __setattr__(self, name: str, value: object, /) -> None: ...

class _DomStringMap:
    def __getattr__(self, name: str, /) -> str | None: ...
    def __setattr__(self, name: str, value: str, /) -> None: ...

class _Element:
    textContent: str
    value: str  # (an input's or a textarea's)
    dataset: _DomStringMap
    def focus(self) -> None: ...

class _Document:
    def getElementById(self, id: str, /) -> _Element | None: ...
    def querySelector(self, selectors: str, /) -> _Element | None: ...

class _Location:
    protocol: str
    host: str

class _Navigator:
    userAgent: str

class _Performance:
    def mark(self, name: str, /) -> object: ...

class _Console:
    def error(self, *data: object) -> None: ...

class _Date:
    def getTimezoneOffset(self) -> float: ...

class _DateConstructor:
    def new(self) -> _Date: ...

class _ObjectConstructor:
    def fromEntries(self, entries: Iterable[JsProxy], /) -> JsProxy: ...

class _WebSocket:
    readyState: int
    onmessage: JsProxy | None
    onclose: JsProxy | None
    def close(self) -> None: ...

class _WebSocketConstructor:
    def new(self, url: str, /) -> _WebSocket: ...

class _ReadResult:
    done: bool
    value: JsProxy  # a Uint8Array

class _Reader:
    def read(self) -> Awaitable[_ReadResult]: ...
    def cancel(self) -> Awaitable[object]: ...

class _ReadableStream:
    def getReader(self) -> _Reader: ...

class _Response:
    ok: bool
    status: int
    body: _ReadableStream

class _TextDecoder:
    def decode(self, input: JsProxy, options: JsProxy, /) -> str: ...

class _TextDecoderConstructor:
    def new(self) -> _TextDecoder: ...

globalThis: _GlobalThis
document: _Document
location: _Location
navigator: _Navigator
performance: _Performance
console: _Console
Date: _DateConstructor
Object: _ObjectConstructor
WebSocket: _WebSocketConstructor
TextDecoder: _TextDecoderConstructor

def encodeURIComponent(component: str, /) -> str: ...
def fetch(resource: str, options: JsProxy, /) -> Awaitable[_Response]: ...
def requestAnimationFrame(callback: JsProxy, /) -> int: ...
