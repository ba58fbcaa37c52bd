"""Which backend a database URL names (server/databases.py), as a table."""

from __future__ import annotations

import pytest

from server.databases import open_database
from server.postgres_db import PostgresDatabase
from server.sqlite_db import SqliteDatabase

BACKENDS = [
    ("sqlite:///data/chat.db", SqliteDatabase, "sqlite"),
    ("sqlite:///:memory:", SqliteDatabase, "sqlite"),
    ("postgresql://postgres@127.0.0.1:5432/test", PostgresDatabase, "postgres"),
    ("postgres://postgres@127.0.0.1/test", PostgresDatabase, "postgres"),
]


@pytest.mark.parametrize(("url", "backend", "dialect"), BACKENDS)
def test_a_url_names_its_backend(url: str, backend: type[object], dialect: str) -> None:
    database = open_database(url)
    assert type(database) is backend and database.dialect == dialect


@pytest.mark.parametrize("url", ["mysql://localhost/chat", "sqlite://relative.db", "chat.db", ""])
def test_any_other_url_is_refused_with_the_ones_accepted(url: str) -> None:
    with pytest.raises(ValueError, match=r"use sqlite:///path or postgresql://"):
        open_database(url)
