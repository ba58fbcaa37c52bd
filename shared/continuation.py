"""Continue: an answer that was cut (at the length limit, or by Stop) is written on, in the same
message, and its text so far stays exactly its start (the prefix rule).

A model asked to go on may repeat what it had written: all of it, or its last words, before the
new text ("...the cat sat on" → "the cat sat on the mat"). ``Continuation`` trims such a repeat
from the stream before anything of it is shown: it holds back the model's first characters while
they could still be a repeat (they are found in the earlier text), and once they cannot, drops
the longest start of them that the earlier text ends with, when that is long enough to be a repeat
rather than chance (``MIN_OVERLAP`` characters, or the whole earlier text). Pure: text in, text out;
the same whatever pieces the stream comes in.
"""

from __future__ import annotations

# A shorter overlap of the earlier text's end and the continuation's start is taken for chance
# (a word, a space, a punctuation mark the model rightly writes again), not for a repeat.
MIN_OVERLAP = 16

GO_ON = (
    "Continue exactly where your previous answer stopped, from its last character. Do not repeat "
    "anything of it and do not add any preamble: your reply is appended to it as it is."
)


class Continuation:
    """Feed the model's continuation of ``prefix`` piece by piece; each call returns what may be
    shown now (appended to the text so far). ``end`` returns what was still held back."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._held = ""
        self._deciding = bool(prefix)

    def feed(self, text: str) -> str:
        if not self._deciding:
            return text
        self._held += text
        if self._held in self.prefix and len(self._held) < len(self.prefix):
            return ""  # (it could still be a repeat: wait for more)
        return self._decide()

    def end(self) -> str:
        """The stream ended: what was held back, less a repeat."""
        return self._decide() if self._deciding else ""

    def _decide(self) -> str:
        self._deciding = False
        held, self._held = self._held, ""
        overlap = _overlap(self.prefix, held)
        if overlap >= MIN_OVERLAP or (overlap and overlap == len(self.prefix)):
            return held[overlap:]
        return held


def _overlap(prefix: str, text: str) -> int:
    """The length of the longest start of ``text`` that ``prefix`` ends with."""
    for size in range(min(len(prefix), len(text)), 0, -1):
        if prefix.endswith(text[:size]):
            return size
    return 0


def continued(prefix: str, pieces: list[str]) -> str:
    """The whole text after a continuation streamed as ``pieces`` (for tests and replays)."""
    trim = Continuation(prefix)
    return prefix + "".join(trim.feed(piece) for piece in pieces) + trim.end()
