"""Schemathesis fuzzes every operation of /openapi.json against a real server process, on each
backend: no input may produce a 5xx, and every response must match the described schema."""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.request
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import drop_schema, postgres_schema
from tests.processes import Server

# An upload's chunk (PATCH /blobs/{sha256}, tus 1.0) is bytes, as application/octet-stream is.
schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def fuzzed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    data = tmp_path_factory.mktemp("fuzz")
    schema = None
    if request.param == "sqlite":
        url = f"sqlite:///{data / 'chat.db'}"
    else:
        schema, url = asyncio.run(postgres_schema())
    server = Server(url, data / "server.log", rate_limit_per_minute="0", auth_rate_limit_per_minute="0")
    server.start()
    body = json.dumps({"username": "fuzz", "password": "a long password"}).encode()
    signed_up = urllib.request.Request(
        server.url + "/auth/signup", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(signed_up) as response:
        token = json.loads(response.read())["token"]
    try:
        yield server, token
    finally:
        server.stop()
        if schema is not None:
            asyncio.run(drop_schema(schema))


def test_no_input_gives_a_server_error(fuzzed: tuple[Server, str]) -> None:
    server, token = fuzzed
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    failures: list[str] = []
    for operation, mode in itertools.product(
        schema.get_all_operations(), (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    ):
        op = operation.ok()

        @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case) -> None:
            signed_in = case.path.startswith(("/sync/", "/blobs/"))
            headers = {"Authorization": f"Bearer {token}"} if signed_in else {}
            response = case.call(base_url=server.url, headers=headers)
            try:
                case.validate_response(
                    response,
                    checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
                )
            except AssertionError as failure:
                failures.append(f"{case.method} {case.path}: {failure}"[:2000])
                raise

        try:
            check()
        except AssertionError:
            pass  # recorded in failures
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE  # an operation with no input to get wrong
    assert not failures, "\n\n".join(failures)
