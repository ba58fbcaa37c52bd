"""What webapp/browser.py uses of pyodide.ffi: Python callables and values handed to JavaScript."""

from collections.abc import Callable, Iterable
from typing import Any

class JsProxy:
    """A JavaScript object seen from Python."""

class JsDoubleProxy(JsProxy):
    """A Python object lent to JavaScript until destroyed."""
    def destroy(self) -> None: ...

def create_proxy(obj: Any, /, *, capture_this: bool = False, roundtrip: bool = True) -> JsDoubleProxy: ...
def to_js(
    obj: Any,
    /,
    *,
    depth: int = -1,
    dict_converter: Callable[[Iterable[JsProxy]], JsProxy] | None = None,
    default_converter: Callable[[Any, Callable[[Any], JsProxy], Callable[[Any, JsProxy], None]], JsProxy] | None = None,
) -> JsProxy: ...
