"""The search index (webapp/search.py) is always the index of the shown tables: after any writes,
in any grouping into transactions, FTS5's own integrity check (which compares the index with
the rows of an external-content table) passes, and a word is found exactly where it is."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.database import FilePersistence
from webapp.store import LocalStore

WORDS = ["alpha", "beta", "gamma", "delta"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
operations = st.lists(
    st.tuples(st.sampled_from(["upsert", "delete", "retitle"]), st.integers(0, 5), texts), max_size=12
)


def check(store: LocalStore) -> None:
    conn = store.conn
    for table in ("messages_fts", "chats_fts"):
        conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")  # raises when they differ
    for word in WORDS:
        expected = {r[0] for r in conn.execute("SELECT id FROM messages WHERE ' ' || content || ' ' LIKE ?", (f"% {word} %",))}
        assert {h.message_id for h in store.search(word) if h.message_id} == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(operations, min_size=1, max_size=4))
def test_the_index_is_always_the_index_of_the_rows(transactions: list[list[tuple[str, int, str]]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = LocalStore(f"{directory}/local.db", FilePersistence())
        store.conn.execute("INSERT INTO chats (id, title, created_at, updated_at, last_seq) VALUES ('c', 'chat', 't', 't', 1)")
        for operations_ in transactions:
            with store._transaction() as conn:
                for kind, n, text in operations_:
                    if kind == "upsert":
                        conn.execute(
                            "INSERT INTO messages (id, chat_id, role, content, parent_id, status, assistant_id, run_id, created_at, updated_at, last_seq, attachments_json) VALUES (?, 'c', 'user', ?, NULL, 'completed', NULL, NULL, 't', 't', 1, NULL) "
                            "ON CONFLICT (id) DO UPDATE SET content = excluded.content",
                            (f"m{n}", text),
                        )
                    elif kind == "delete":
                        conn.execute("DELETE FROM messages WHERE id = ?", (f"m{n}",))
                    else:
                        conn.execute("UPDATE chats SET title = ? WHERE id = 'c'", (text,))
            check(store)
        store.close()


def test_a_snippet_marks_the_words_found_around_the_first_and_escapes_the_rest() -> None:
    from webapp.search import _Marker

    long = "intro " * 40 + "the <b>Café</b> crème & more " + "outro " * 60
    snippet = _Marker("cafe cre").snippet(long)
    assert snippet.startswith("…") and snippet.endswith("…") and len(snippet) < 260
    assert "&lt;b&gt;<mark>Café</mark>&lt;/b&gt; <mark>crème</mark> &amp; more" in snippet
    assert _Marker("Hello").snippet("hello, HELLO world") == "<mark>hello</mark>, <mark>HELLO</mark> world"
    assert _Marker("при").snippet("Привет, мир") == "<mark>Привет</mark>, мир"
    assert _Marker("x").snippet("a x b xy") == "a <mark>x</mark> b xy"  # one letter: a word, not a prefix
    assert _Marker("zzz").snippet("nothing here") == "nothing here"


def test_chats_found_by_title_come_in_one_order_whatever_order_they_were_stored_in() -> None:
    """Two devices with the same chats list them the same (a snapshot stores them in another order
    than the log does)."""
    orders = []
    for ids in (["a", "b", "c"], ["c", "a", "b"]):
        with tempfile.TemporaryDirectory() as directory:
            store = LocalStore(f"{directory}/local.db", FilePersistence())
            for chat_id in ids:  # the same time for all: only the id can order them
                store.conn.execute("INSERT INTO chats (id, title, created_at, updated_at, last_seq) VALUES (?, 'alpha plans', 't', 't', 1)", (chat_id,))
            orders.append([hit.chat_id for hit in store.search("alpha")])
            store.close()
    assert orders[0] == orders[1] and sorted(orders[0]) == ["a", "b", "c"]
