"""Sessions (webapp/app.py): an ended session keeps the chats on screen and writable; the same
user signs in again without losing anything; another user never sees (or sends) the first
one's data without being asked; Sign out ends the session and keeps or removes this device's copy."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.webapp.test_client import OfflineTransport, make_client
from webapp.app import SIGNIN_NO_ANSWER
from webapp.sync import Status


async def signed_in_with_a_chat(tmp_path: Path):  # type: ignore[no-untyped-def]
    client, page, auth = make_client(tmp_path)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    await client.dispatch("send", {"text": "first words", "assistant": ""})
    await client.dispatch("new-chat", {})
    await client.dispatch("send", {"text": "the open chat", "assistant": ""})
    return client, page, auth


async def test_an_ended_session_keeps_the_chats_writable_and_the_same_user_resumes_where_they_were(tmp_path: Path) -> None:
    client, page, auth = await signed_in_with_a_chat(tmp_path)
    layout, chat = page.regions["root"], client.selected
    client._status(Status.SIGNED_OUT)  # the server said 401
    assert "Your session has ended" in page.regions["session"] and 'value="ann"' in page.regions["session"]
    assert page.regions["root"] is layout  # the chats stay on screen
    await client.dispatch("send", {"text": "written while signed out", "assistant": ""})
    page.paint()
    assert "written while signed out" in page.messages

    auth.accept = False
    await client.dispatch("signin", {"username": "ann", "password": "wrong"})
    assert "Wrong username or password." in page.regions["session"] and page.regions["root"] is layout
    auth.accept = True
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    assert page.regions["session"] == "" and page.regions["root"] is layout  # no new page: the same one
    assert client.selected == chat and "written while signed out" in page.messages
    assert client.store.pending_count() == 5  # nothing lost: it all waits to be sent


async def test_another_user_is_asked_before_the_unsent_changes_go_and_never_sees_them(tmp_path: Path) -> None:
    client, page, auth = await signed_in_with_a_chat(tmp_path)
    client._status(Status.SIGNED_OUT)
    await client.dispatch("signin", {"username": "bo", "password": "right one"})
    assert auth.signins == ["ann"]  # not signed in yet: asked first
    question = page.regions["session"]
    assert "ann has 4 changes on this device that did not reach the server yet" in question
    await client.dispatch("cancel-replace-account", {})
    assert client.store.account().username == "ann" and client.store.pending_count() == 4  # type: ignore[union-attr]
    assert "Your session has ended" in page.regions["session"]

    await client.dispatch("signin", {"username": "bo", "password": "right one"})
    await client.dispatch("confirm-replace-account", {})
    assert auth.signins == ["ann", "bo"]
    assert client.store.account().username == "bo" and client.store.pending_count() == 0  # type: ignore[union-attr]
    assert client.store.chats() == [] and "first words" not in page.regions["root"] + page.messages


async def test_sign_out_ends_the_session_and_keeps_or_removes_this_devices_copy(tmp_path: Path) -> None:
    client, page, auth = await signed_in_with_a_chat(tmp_path)
    await client.dispatch("signout", {})
    assert "Sign out ann?" in page.regions["session"] and "4 changes did not reach the server yet" in page.regions["session"]
    await client.dispatch("cancel-signout", {})
    assert page.regions["session"] == "" and auth.signouts == 0

    await client.dispatch("signout", {})
    await client.dispatch("confirm-signout", {})  # kept
    assert auth.signouts == 1 and "The chats of ann are still on this device." in page.regions["root"]
    assert (page.status, page.status_text) == ("none", "Not signed in")  # (not "Online": nothing syncs)
    page.status = page.status_text = ""
    client.start()  # (a reload): the sign-in form, not the chats
    assert 'data-action="signin"' in page.regions["root"] and "first words" not in page.messages
    assert (page.status, page.status_text) == ("none", "Not signed in")
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    assert len(client.store.chats()) == 2 and client.store.pending_count() == 4

    await client.dispatch("signout", {})
    await client.dispatch("confirm-signout", {"remove": "on"})
    assert auth.signouts == 2 and client.store.account() is None and client.store.chats() == []
    assert "The copy on this device was removed." in page.regions["root"]


async def test_a_sign_in_or_out_the_server_never_answers_is_given_up_with_words(tmp_path: Path) -> None:
    """A server that never answers (a connection left half-open) does not leave a sign-in, a
    sign-out or the questions asked when online again waiting for good."""
    client, page, auth = make_client(tmp_path)
    client.start()
    client.ask_seconds, auth.silent = 0.05, True
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    assert SIGNIN_NO_ANSWER in page.regions["root"] and 'data-action="signin"' in page.regions["root"]
    assert client.store.account() is None
    auth.silent = False
    await client.dispatch("signin", {"username": "ann", "password": "right one"})  # tried again: in
    assert client.store.account() is not None and "New chat" in page.regions["root"]

    class Silent(OfflineTransport):
        async def assistants(self) -> None:
            await asyncio.Event().wait()

        blob_limits = assistants

    client.s.transport = client.choice.transport = Silent()  # type: ignore[assignment]
    await client.choice.refresh(0.05)  # (each returns: asked again when next online)
    await client._learn_limits()

    auth.silent = True
    await client.dispatch("signout", {})
    await client.dispatch("confirm-signout", {})  # signed out here, the session left to expire
    assert "The chats of ann are still on this device." in page.regions["root"]
    assert "the session ends on the server only when it expires" in page.regions["root"]
    assert client.store.signed_out() and auth.signouts == 0


async def test_the_painted_render_cache_is_asked_for_by_account_and_layout_and_taken_over(tmp_path: Path) -> None:
    """The client asks the page whether it shows the render cache of this account and layout (the
    ones it remembers); the page answers (static/view.js: only for that account and layout, once:
    tests/e2e/test_view.py), and a screen it shows is taken over as it is."""
    client, page, _ = await signed_in_with_a_chat(tmp_path)
    account, layout = page.remembered  # type: ignore[misc]
    first = client.store.chats()[-1].id  # not the latest: the one the cache showed
    client.stop()

    def restart(painted: str | None):  # type: ignore[no-untyped-def]
        again, page, _ = make_client(tmp_path)
        page.painted = painted
        page.regions["root"] = "painted"
        return again, page

    again, page = restart(first)
    await again.store.open()
    again.start()
    assert page.asked_cached == [(account, layout)]
    assert page.regions["root"] == "painted"  # the painted page, taken over as it is
    assert again.selected == first and page.remembered == (account, layout)
    assert "first words" in page.messages
    again.stop()

    again, page = restart(None)  # not painted, or another account's or layout's
    await again.store.open()
    again.start()
    assert page.asked_cached == [(account, layout)]
    assert page.regions["root"] != "painted" and 'id="chat-list"' in page.regions["root"]  # drawn anew
    assert again.selected == again.store.chats()[0].id
    again.stop()


async def test_the_render_cache_is_forgotten_before_another_account_signs_in_and_at_sign_out(tmp_path: Path) -> None:
    client, page, auth = await signed_in_with_a_chat(tmp_path)
    assert page.remembered is not None and page.remembered[0] == client.store.account().user_id  # type: ignore[union-attr]
    remembered: list[object] = []
    signin = auth.signin

    async def watched(username: str, password: str, signup: bool):  # type: ignore[no-untyped-def]
        remembered.append(page.remembered)  # what the cache holds when the other account signs in
        return await signin(username, password, signup)

    auth.signin = watched  # type: ignore[method-assign]
    client._status(Status.SIGNED_OUT)
    await client.dispatch("signin", {"username": "bo", "password": "right one"})
    await client.dispatch("confirm-replace-account", {})
    assert remembered == [None]
    assert page.remembered is not None and page.remembered[0] == client.store.account().user_id  # type: ignore[union-attr]
    await client.dispatch("confirm-signout", {})
    assert page.remembered is None
