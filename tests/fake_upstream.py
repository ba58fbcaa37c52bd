"""The fake OpenAI-compatible model service, which ``python -m server chaos`` ships
(server/chaos/upstream.py); the tests import it from here as they always have."""

from __future__ import annotations

from server.chaos.upstream import CORS, FakeUpstream, answer_words, full_answer

__all__ = ["CORS", "FakeUpstream", "answer_words", "full_answer"]
