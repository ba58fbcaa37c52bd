"""Why "Model on this device" could not answer, in sentences for the person (webapp/browser.py's
FetchModel raises them as ``UpstreamError``; the reply then says "The assistant could not
answer: <sentence>.", on every device: shared/assistants.py logs the sentence with the reply).

Pure: the page's fetch is in browser.py, the words are here, where they are tested. The model's
server is one the person set up (Ollama, LM Studio, llama.cpp), so each sentence says what to
check there.
"""

from __future__ import annotations


def unreachable(url: str) -> str:
    """fetch itself failed: nothing listens there, or the page may not read its answers (CORS)."""
    return (
        f"{url} could not be reached: check that the model's server is running at that address and "
        "that it allows this page's origin (CORS)"
    )


def refused(url: str, model: str, status: int) -> str:
    """The model's server answered, with an HTTP error."""
    if status == 404:
        return (
            f"{url} answered HTTP 404 (not found): check the address (it usually ends in /v1) and that "
            f"the model {model!r} is installed there"
        )
    if status in (401, 403):
        return f"{url} answered HTTP {status}: it asks for a key or refuses this page, which a model on this device should not"
    if status >= 500:
        return f"the model's server failed (HTTP {status}): its own log says why"
    return f"{url} answered HTTP {status}"


def broke_off() -> str:
    return "the model's stream broke off before the answer was complete"


def ended_early() -> str:
    return "the model's stream ended before the answer was complete"


def not_completions() -> str:
    return "the model's server sent something other than an OpenAI-compatible chat-completions stream"


def page_closed() -> str:
    """A reply this device was writing when its page went away (the call died with the page)."""
    return "the page was closed or reloaded while this answer was being written"
