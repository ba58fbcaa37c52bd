"""The server's assistants: which exist (configured in one JSON file or env var), and the models
behind them: the built-in demo model (no network, no key), or any OpenAI-compatible chat-completions service with
streaming (OpenRouter, vLLM, Ollama, llama.cpp, ...).

Configuration, a JSON list (``--assistants-file`` / ``CHAT_ASSISTANTS_FILE``, or the text itself in
``CHAT_ASSISTANTS``); the key is never in the file, only the name of the variable holding it:

    [{"id": "llama", "name": "Llama 3 (Ollama)", "provider": "openai",
      "baseUrl": "http://127.0.0.1:11434/v1", "model": "llama3", "apiKeyEnv": "OLLAMA_KEY"}]

``vision`` (default false): the model reads images, which its requests then carry. ``prefill``
(default false): its service continues an unfinished assistant turn sent last (llama.cpp, Ollama,
vLLM), which Continue then uses (shared/assistants.py, ``continuing``).

Without configuration there is one assistant, ``demo`` (provider ``demo``), so the app works with
nothing set up and no network beyond the server.
"""

from __future__ import annotations

import functools
import json
import os
import ssl
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from shared.assistants import (
    DEFAULT_SAMPLING,
    DemoModel,
    Model,
    Piece,
    Sampling,
    Turn,
    UpstreamError,
    completion_pieces,
    completion_request,
)
from shared.sse import SseDecoder


class AssistantConfig(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200)
    provider: Literal["demo", "openai"]
    base_url: str | None = None
    model: str = "demo"
    api_key_env: str | None = None
    vision: bool = False  # it reads images (sent as image_url content parts: shared/prompt.py)
    # Its service continues an unfinished assistant turn given last (llama.cpp, Ollama, vLLM): a
    # Continue sends the answer so far that way; without it, a short user turn asks to go on.
    prefill: bool = False


# The one assistant of a server with no configuration: it needs no network and no key, but it
# answers on the server (a browser that cannot reach the server gets no answer from it).
DEFAULT = [AssistantConfig(id="demo", name="Demo model (on the server)", provider="demo", model="demo")]


@dataclass(frozen=True)
class Assistant:
    config: AssistantConfig
    model: Model

    def public(self) -> dict[str, str | bool]:
        """As ``GET /assistants`` lists it (docs/protocol.md, "GET /assistants")."""
        config = self.config
        return {"id": config.id, "name": config.name, "kind": "remote", "model": config.model, "vision": config.vision}


def load_assistants(
    file: str, inline: str, upstream_timeout: float, demo_seconds_per_word: float
) -> dict[str, Assistant]:
    """The configured assistants by id; raises SystemExit with a sentence when the configuration
    is wrong (at start-up, not at the first run)."""
    source = Path(file).read_text() if file else inline
    try:
        configs = [AssistantConfig.model_validate(item) for item in json.loads(source)] if source else DEFAULT
    except (ValueError, ValidationError, TypeError) as e:
        raise SystemExit(f"the assistants configuration is not valid: {e}") from None
    assistants: dict[str, Assistant] = {}
    for config in configs:
        if config.id in assistants:
            raise SystemExit(f"the assistants configuration names {config.id!r} twice")
        model: Model
        if config.provider == "demo":
            model = DemoModel(seconds_per_word=demo_seconds_per_word)
        else:
            if not config.base_url:
                raise SystemExit(f"assistant {config.id!r}: an openai provider needs a baseUrl")
            key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
            model = OpenAIModel(config.base_url, config.model, key, upstream_timeout)
        assistants[config.id] = Assistant(config, model)
    return assistants


@functools.cache
def _tls() -> ssl.SSLContext:
    """The CA bundle as httpx finds it (SSL_CERT_FILE, SSL_CERT_DIR, else certifi's), loaded once a
    process: a client made with none loads it again, about 30 ms of CPU for every request."""
    return httpx.create_ssl_context()


class OpenAIModel:
    """POST {base_url}/chat/completions with ``stream: true``, read as server-sent events. The usage
    is asked for in the stream (``stream_options.include_usage``). A read that waits longer than
    ``timeout`` seconds (a stalled stream) fails the call."""

    def __init__(self, base_url: str, model: str, api_key: str, timeout: float) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout

    async def stream(self, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> AsyncGenerator[Piece, None]:
        body = completion_request(self.model, turns, sampling)
        try:
            timeout = httpx.Timeout(self.timeout, connect=min(10.0, self.timeout))
            async with httpx.AsyncClient(timeout=timeout, verify=_tls()) as client:
                async with client.stream("POST", self.url, json=body, headers=self.headers) as response:
                    if response.status_code >= 400:
                        raise UpstreamError(f"the model's service answered HTTP {response.status_code}")
                    decoder = SseDecoder()
                    async for text in response.aiter_text():
                        for event in decoder.feed(text):
                            pieces = completion_pieces(event.data)
                            if pieces is None:
                                return
                            for piece in pieces:
                                yield piece
                    raise UpstreamError("the model's stream broke off before the end")
        except httpx.TimeoutException:
            raise UpstreamError(f"the model's service sent nothing for {self.timeout:g} s") from None
        except httpx.HTTPError as e:
            raise UpstreamError(f"the model's service could not be reached ({type(e).__name__})") from None
        except ValueError:
            raise UpstreamError("the model's service sent a stream that is not chat completions") from None
