"""A chat as a tree (shared/thread.py): the path shown, the branches at each fork, and the path an
assistant is asked about, which is the path shown."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.assistants import history_along
from shared.models import Message
from shared.thread import ROOT, Link, parents, path_to, shown_path


def link(id: str, parent: str | None, at: int) -> Link:
    return Link(id, parent, f"2026-11-30T12:00:{at:02d}.000Z")


# q1 -> a1 | a2 (regenerated) ; a1 -> q2 -> a3 ; a2 -> q3 ; q1' (edited first question) -> a4
CHAT = [
    link("q1", None, 1), link("a1", "q1", 2), link("q2", "a1", 3), link("a3", "q2", 4), link("a2", "q1", 5),
    link("q3", "a2", 6), link("q1b", None, 7), link("a4", "q1b", 8),
]  # fmt: skip


def ids(steps: list[object]) -> list[str]:
    return [s.id for s in steps]  # type: ignore[attr-defined]


def test_the_newest_branch_is_shown_unless_another_was_chosen() -> None:
    assert ids(shown_path(CHAT, {})) == ["q1b", "a4"]
    assert ids(shown_path(CHAT, {ROOT: "q1"})) == ["q1", "a2", "q3"]
    assert ids(shown_path(CHAT, {ROOT: "q1", "q1": "a1"})) == ["q1", "a1", "q2", "a3"]
    assert ids(shown_path(CHAT, {ROOT: "gone"})) == ["q1b", "a4"]  # a choice no longer there: the newest
    first, answer = shown_path(CHAT, {ROOT: "q1", "q1": "a1"})[:2]
    assert (first.fork, first.siblings, first.index) == (ROOT, ("q1", "q1b"), 0)
    assert (answer.fork, answer.siblings, answer.index) == ("q1", ("a1", "a2"), 0)


def test_a_message_whose_parent_was_deleted_follows_the_one_before_it() -> None:
    chat = [link("a", None, 1), link("b", "a", 2), link("c", "gone", 3), link("d", "c", 4)]
    assert parents(chat) == {"a": ROOT, "b": "a", "c": "b", "d": "c"}
    assert ids(shown_path(chat, {})) == ["a", "b", "c", "d"]
    assert path_to(chat, "d") == ["a", "b", "c", "d"] and path_to(chat, "gone") == []


def test_an_orphan_never_follows_its_own_descendant() -> None:
    # clocks differ between devices: "b" answers "a" but looks older, and "a"'s parent is gone
    chat = [link("b", "a", 1), link("a", "gone", 2)]
    assert parents(chat) == {"a": ROOT, "b": "a"}
    assert ids(shown_path(chat, {})) == ["a", "b"]


def test_an_assistant_is_asked_about_the_path_to_its_question() -> None:
    messages = [
        Message(id=f"00000000-0000-7000-8000-00000000000{i}", chat_id="00000000-0000-7000-8000-000000000000",
                role="user", content=f"m{i}", parent_id=None if p is None else f"00000000-0000-7000-8000-00000000000{p}",
                created_at=f"2026-11-30T12:00:0{i}.000Z")
        for i, p in ((1, None), (2, 1), (3, 1), (4, 3))
    ]  # fmt: skip
    assert [m.content for m in history_along(messages, messages[3].id)] == ["m1", "m3", "m4"]
    assert [m.content for m in history_along(messages, messages[1].id)] == ["m1", "m2"]
    assert history_along(messages, None) == []
    # A follow-up still queued is not in the tree: the orphan "m4" (its parent gone) follows the
    # message made just before it, which is "m1", not the queued one.
    orphan = messages[3].model_copy(update={"parent_id": "00000000-0000-7000-8000-000000000009"})
    queued = messages[2].model_copy(update={"status": "queued", "parent_id": None})
    assert [m.content for m in history_along([messages[0], queued, orphan], orphan.id)] == ["m1", "m4"]
    sent = queued.model_copy(update={"status": "completed", "parent_id": messages[0].id})  # (once sent, it is)
    assert [m.content for m in history_along([messages[0], sent, orphan], orphan.id)] == ["m1", "m3", "m4"]


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[Link], dict[str, str]]:
    count = draw(st.integers(min_value=0, max_value=25))
    links: list[Link] = []
    for i in range(count):
        parent = draw(st.one_of(st.none(), st.sampled_from([f"m{j}" for j in range(i)] + ["gone"]) if i else st.none()))
        links.append(link(f"m{i}", parent, draw(st.integers(min_value=0, max_value=59))))
    kept = draw(st.lists(st.sampled_from(links), unique=True)) if links else []
    forks = [ROOT] + [x.id for x in links]
    chosen = draw(st.dictionaries(st.sampled_from(forks), st.sampled_from([x.id for x in links] or ["x"]), max_size=6))
    return kept, chosen


@given(trees())
def test_the_shown_path_is_a_chain_of_the_tree_and_what_an_assistant_is_asked_about(tree: tuple[list[Link], dict[str, str]]) -> None:
    links, chosen = tree
    path = shown_path(links, chosen)
    up = parents(links)
    fork = ROOT
    for step in path:
        assert up[step.id] == step.fork == fork and step.id in step.siblings
        assert sorted(step.siblings) == sorted(child for child, parent in up.items() if parent == step.fork)
        if chosen.get(step.fork) in step.siblings:
            assert step.id == chosen[step.fork]
        else:
            assert step.id == step.siblings[-1]
        fork = step.id
    assert not any(parent == fork for parent in up.values())  # it goes on to a leaf
    if path:
        assert path_to(links, path[-1].id) == ids(path)  # the assistant's history is the path shown
    assert bool(path) == bool(links)
    for link_ in links:  # every message is reachable from the root: no cycles
        assert path_to(links, link_.id)[0] in {child for child, parent in up.items() if parent == ROOT}
