"""A page of ``GET /sync/state`` read straight into rows: for each table, a tuple per row in the
table's column order (shared/schema.py), as ``executemany`` takes them, with no pydantic model
built per row (webapp/snapshots.py stores them as they are).

The validation is the models' own (shared/models.py): each column is checked by the core schema
of its model's field, and so normalized the same way (an id or a time in another form than the
canonical one, made canonical), and a page refused by the models is refused here, with the same
``ValidationError`` naming the row and the field, before anything of it is stored. Stricter in one
way: a row of the state carries its ``updatedAt`` and ``lastSeq`` (docs/protocol.md, "Entities"),
which a model takes as optional (an event's payload has neither); a row without them is refused
here, where the model path let SQLite's NOT NULL drop it (a new device's ``INSERT OR IGNORE``
skipped it: the page stored but for that row). The attachments and the usage become the JSON text
of their columns, as ``Message.attachments_json`` and ``Message.usage_json`` write it.

Only the page's rows are shaped differently: the wire format is docs/protocol.md's, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from operator import attrgetter, itemgetter
from typing import Any, cast

from pydantic_core import CoreSchema, SchemaValidator, core_schema

from shared.models import Chat, Message, Preset, Settings, Snapshot, StateResponse, Wire, attachments_json, no_nul, usage_json
from shared.schema import CHATS, MESSAGES, PRESETS, SETTINGS, TABLES, Table

Row = tuple[Any, ...]


@dataclass(frozen=True)
class StatePage:
    """One page of ``GET /sync/state`` (``StateResponse``), its snapshot as ``rows``: each
    table's (by name, every table there) in that table's column order."""

    rows: Mapping[str, Sequence[Row]]
    up_to_seq: int
    current_seq: int
    next_page: str | None = None
    total: int | None = None

    def count(self) -> int:
        """The rows the page holds, of every kind."""
        return sum(len(rows) for rows in self.rows.values())


def snapshot_rows(snapshot: Snapshot) -> dict[str, list[Row]]:
    """A snapshot's models as rows (the full resync's, and what the rows read from a page are
    checked against in the tests)."""
    return {name: list(map(attrgetter(*table.column_names), getattr(snapshot, name))) for name, table in TABLES.items()}


def page_of(response: StateResponse) -> StatePage:
    """A page parsed into models, as rows."""
    return StatePage(snapshot_rows(response.snapshot), response.up_to_seq, response.current_seq, response.next_page, response.total)


# A column whose model field has another name, and what makes the column's value of the field's.
_FROM_FIELD: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "attachments_json": ("attachments", attachments_json),
    "usage_json": ("usage", usage_json),
}


def _parts(model: type[Wire]) -> tuple[dict[str, Any], Any, list[CoreSchema]]:
    """A model's fields' core schemas, its config and the definitions they may refer to."""
    schema: Any = model.__pydantic_core_schema__
    definitions: list[CoreSchema] = []
    if schema["type"] == "definitions":
        definitions, schema = schema["definitions"], schema["schema"]
    assert schema["type"] == "model" and schema["schema"]["type"] == "model-fields", schema["type"]
    return schema["schema"]["fields"], schema.get("config"), definitions


def _row_schema(model: type[Wire], table: Table, definitions: list[CoreSchema]) -> CoreSchema:
    """A row of ``table`` as ``model`` validates it, given as the dict of its columns."""
    fields, config, refs = _parts(model)
    definitions += refs
    columns: dict[str, core_schema.TypedDictField] = {}
    for column in table.columns:
        name, to_column = _FROM_FIELD.get(column.name, (column.name, None))
        field = fields[name]
        schema: Any = field["schema"]
        if to_column is not None:  # (None stays None; an empty list of attachments becomes None)
            assert schema["type"] == "default"
            inner = schema["schema"]
            if inner["type"] == "nullable":
                inner = core_schema.nullable_schema(core_schema.no_info_after_validator_function(to_column, inner["schema"]))
            else:
                inner = core_schema.no_info_after_validator_function(to_column, inner)
            schema = core_schema.with_default_schema(inner, default=None)
        elif not column.nullable and schema["type"] == "default" and schema.get("default", ...) is None:
            # Optional in the model (an event's payload), but every row of the state has it.
            assert schema["schema"]["type"] == "nullable", (table.name, column.name)
            schema = schema["schema"]["schema"]
        required = schema["type"] != "default"
        columns[column.name] = core_schema.typed_dict_field(schema, required=required, validation_alias=field["validation_alias"])
    return core_schema.typed_dict_schema(columns, config=config)


def _page_schema() -> CoreSchema:
    definitions: list[CoreSchema] = []
    models: dict[str, tuple[type[Wire], Table]] = {
        "chats": (Chat, CHATS), "messages": (Message, MESSAGES), "settings": (Settings, SETTINGS), "presets": (Preset, PRESETS)
    }  # fmt: skip
    rows = {name: _row_schema(model, table, definitions) for name, (model, table) in models.items()}
    snapshot_fields, snapshot_config, _ = _parts(Snapshot)
    snapshot: dict[str, core_schema.TypedDictField] = {}
    for name, field in snapshot_fields.items():
        required = field["schema"]["type"] != "default"
        schema: CoreSchema = core_schema.list_schema(rows[name])
        if not required:  # (absent from an older server: none)
            schema = core_schema.with_default_schema(schema, default_factory=list)
        snapshot[name] = core_schema.typed_dict_field(schema, required=required, validation_alias=field["validation_alias"])
    page_fields, page_config, _ = _parts(StateResponse)
    page: dict[str, core_schema.TypedDictField] = {}
    for name, field in page_fields.items():
        value: CoreSchema = core_schema.typed_dict_schema(snapshot, config=snapshot_config) if name == "snapshot" else field["schema"]
        page[name] = core_schema.typed_dict_field(value, required=value["type"] != "default", validation_alias=field["validation_alias"])
    whole = core_schema.typed_dict_schema(page, config=page_config)
    return core_schema.definitions_schema(whole, definitions) if definitions else whole


def _without_nul_checks(schema: Any) -> Any:
    """The schema without the check of each text for NUL (``no_nul``, a call into Python per
    field and row)."""
    if isinstance(schema, dict):
        if schema.get("type") == "function-after" and schema["function"]["function"] is no_nul:
            return _without_nul_checks(schema["schema"])
        return {k: _without_nul_checks(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_without_nul_checks(v) for v in schema]
    return schema


@cache
def _validator(nul_free: bool = False) -> SchemaValidator:
    """Made at the first page (only a device that takes the state path needs it), not at
    start-up. ``nul_free``: for a body that holds no NUL character, which no text in it can
    then hold: JSON writes one only as the escape ``\\u0000`` (a raw control character is
    refused by the parser), so a body without that escape needs no check of each text for it
    (a third of the parse's time under Pyodide, measured: tests/bench/bench_state_page.py). A
    body with the six characters anywhere (even as text, an escaped backslash before them) is
    checked text by text."""
    schema = _page_schema()
    # (Only keys are cached: the values are new strings, each stored once.)
    return SchemaValidator(_without_nul_checks(schema) if nul_free else schema, {"title": "StateResponse", "cache_strings": "keys"})


_COLUMNS = {name: itemgetter(*table.column_names) for name, table in TABLES.items()}


def _page(data: dict[str, Any]) -> StatePage:
    snapshot = data["snapshot"]
    return StatePage(
        {name: list(map(columns, snapshot[name])) for name, columns in _COLUMNS.items()},
        data["up_to_seq"],
        data["current_seq"],
        data["next_page"],
        data["total"],
    )


def prepare_reader() -> None:
    """Make what reads a page (once), so that the first page need not wait for it."""
    _validator(True)


def read_state_page(body: bytes | str) -> StatePage:
    """A page of ``GET /sync/state`` from the response's body (parsed by pydantic-core as it
    validates, no decoding to a string first); raises ``pydantic.ValidationError`` when it is
    not one."""
    if isinstance(body, bytes):
        nul_free = b"\\u0000" not in body and b"\x00" not in body
    else:
        nul_free = "\\u0000" not in body and "\x00" not in body
    return _page(cast(dict[str, Any], _validator(nul_free).validate_json(body)))


def state_page_of(data: Any) -> StatePage:
    """The same from the JSON already parsed (``json.loads``)."""
    return _page(cast(dict[str, Any], _validator().validate_python(data)))
