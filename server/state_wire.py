"""A ``/sync/state`` page's rows as the JSON the models would make of them, straight from the
tables: no model built per row (a 5,000-row page: ~6 ms for the rows' dicts and ~4 ms for
pydantic-core's ``to_json``, against ~20 ms to validate them as models and ~15 ms to serialize
those, on the server's event loop, for each page a new device takes).

Every row was validated when its event was written, so each column is already the field's
canonical value; what the models would add is derived from them once, here: each column's
camelCase key (the models' alias), which fields are left out of the JSON when null
(``exclude_if``), and the two columns of JSON text (``attachments_json``, ``usage_json``), which
are read back through their models (rare: the attachments of a message, an answer's usage), so
that an older row's JSON comes out as the models make it today. tests/server/test_state_wire.py
checks the result equals the models' for every kind of row, on both stores.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic_core

from server.db import Value
from shared.models import Attachment, Chat, Message, Preset, Settings, Snapshot, TokenUsage, Wire
from shared.schema import CHATS, MESSAGES, PRESETS, SETTINGS, Table

# The columns of JSON text, each read back through its model into the field's JSON.
_JSON_COLUMNS: dict[str, Callable[[str], Any]] = {
    "attachments_json": lambda raw: [Attachment.model_validate(a).wire() for a in json.loads(raw)] or None,
    "usage_json": lambda raw: TokenUsage.model_validate_json(raw).wire(),
}


@dataclass(frozen=True)
class _Column:
    key: str  # the field's JSON name
    omit_null: bool  # left out of the JSON when null (the field's exclude_if)
    read: Callable[[str], Any] | None  # a column of JSON text: its field's JSON


def _columns(table: Table, model: type[Wire]) -> tuple[_Column, ...]:
    columns = []
    for column in table.column_names:
        read = _JSON_COLUMNS.get(column)
        field = column.removesuffix("_json") if read is not None else column
        info = model.model_fields[field]
        assert info.alias is not None  # (Wire's alias generator names every field)
        columns.append(_Column(info.alias, info.exclude_if is not None, read))
    return tuple(columns)


_MODELS: tuple[tuple[Table, type[Wire]], ...] = ((CHATS, Chat), (MESSAGES, Message), (PRESETS, Preset), (SETTINGS, Settings))
_TABLES = {table.name: _columns(table, model) for table, model in _MODELS}
# Every field of each model is a column (or a column's JSON): a field added to a model but not
# to its table (or the other way round) fails here, at import, not in a client.
for _table, _model in _MODELS:
    assert {c.key for c in _TABLES[_table.name]} == {f.alias for f in _model.model_fields.values()}, _table.name


def wire_rows(table: str, rows: Sequence[Sequence[Value]]) -> list[dict[str, Any]]:
    """The rows (each in its table's column order) as their JSON objects."""
    columns = _TABLES[table]
    # (The columns always there and taken as they are lead every table: zipped in one go.)
    lead = next((i for i, c in enumerate(columns) if c.omit_null or c.read), len(columns))
    keys, rest = [c.key for c in columns[:lead]], tuple(enumerate(columns[lead:], lead))
    result = []
    for row in rows:
        item: dict[str, Any] = dict(zip(keys, row))
        for i, column in rest:
            value = row[i]
            if value is not None and column.read is not None:
                value = column.read(str(value))
            if value is not None or not column.omit_null:
                item[column.key] = value
        result.append(item)
    return result


# A ``Snapshot``'s lists, in its order (each named as its table).
SNAPSHOT = tuple(Snapshot.model_fields)


def state_json(
    snapshot: Mapping[str, list[dict[str, Any]]], up_to_seq: int, current_seq: int, next_page: str | None, total: int | None
) -> bytes:
    """A ``StateResponse``'s JSON, its snapshot's lists (by name) made by ``wire_rows``."""
    response = {"snapshot": snapshot, "upToSeq": up_to_seq, "currentSeq": current_seq, "nextPage": next_page, "total": total}
    return pydantic_core.to_json(response)
