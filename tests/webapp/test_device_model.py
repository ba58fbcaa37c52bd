"""Why "Model on this device" could not answer (webapp/device_model.py): sentences that name the
address and say what to check there, as the person reads them under the failed reply."""

from __future__ import annotations

from webapp import device_model, message_html
from webapp.device_model import refused, unreachable

URL = "http://127.0.0.1:11434/v1/chat/completions"


def test_each_failure_says_what_to_check() -> None:
    assert unreachable(URL) == (
        f"{URL} could not be reached: check that the model's server is running at that address and "
        "that it allows this page's origin (CORS)"
    )
    assert refused(URL, "llama3", 404) == (
        f"{URL} answered HTTP 404 (not found): check the address (it usually ends in /v1) and that "
        "the model 'llama3' is installed there"
    )
    assert "asks for a key" in refused(URL, "llama3", 401) and "HTTP 403" in refused(URL, "llama3", 403)
    assert refused(URL, "llama3", 500) == "the model's server failed (HTTP 500): its own log says why"
    assert refused(URL, "llama3", 418) == f"{URL} answered HTTP 418"
    for sentence in (device_model.broke_off(), device_model.ended_early(), device_model.not_completions()):
        assert sentence.startswith("the model's ")


def test_the_sentence_is_what_the_failed_reply_says() -> None:
    from shared.models import Message

    T = "2026-11-30T12:00:00.000Z"
    chat = "018bcfe5-6811-75a3-8a93-a5ee0cd2fc39"
    reply = Message(id="018bcfe5-6814-7148-af22-461e49db478b", chat_id=chat, role="assistant", content="",
                    status="failed_upstream", assistant_id="on-device", created_at=T, last_seq=4)  # fmt: skip
    error = Message(id="018bcfe5-6815-7771-aff3-8ef0a46b4671", chat_id=chat, role="error", content=unreachable(URL),
                    parent_id=reply.id, assistant_id="on-device", created_at=T, last_seq=5)  # fmt: skip
    reasons = message_html.failure_reasons({reply.id: reply, error.id: error})
    assert reasons == {reply.id: error}
    html = message_html.message_item(message_html.Item(message=reply, reason=error.content))
    assert f"The assistant could not answer: {URL} could not be reached: check that" in html
    assert "allows this page&#x27;s origin (CORS)." in html
    # A reply that did not fail, or an error answering something else, is no reason.
    completed = reply.model_copy(update={"status": "completed"})
    assert message_html.failure_reasons({reply.id: completed, error.id: error}) == {}
    assert message_html.message_item(message_html.Item(message=reply)).count("The assistant could not answer.") == 1
