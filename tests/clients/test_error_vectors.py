"""The shared error vectors (clients/error-vectors.json), run against the Python client.

The JS suite runs the same file (clients/js/test/errors.test.mjs). Every code of the error table
in docs/api.md has a vector, so a new code cannot reach a client unclassified.
"""

import json
from typing import Any

import mailservice_client
import pytest
from mailservice_client.errors import error_from_response

from tests.contract.test_error_codes import documented_error_table
from tests.harness import ROOT

CASES: list[dict[str, Any]] = json.loads((ROOT / "clients" / "error-vectors.json").read_text())["cases"]


def response_body(case: dict[str, Any]) -> bytes:
    body = case["body"]
    return (body if isinstance(body, str) else json.dumps(body)).encode()


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_the_python_client_picks_each_vectors_class(case: dict[str, Any]):
    error = error_from_response(case["status"], {"X-Request-Id": "req_header"}, response_body(case))
    assert type(error) is getattr(mailservice_client, case["class"])
    assert (error.code, error.message, error.status) == (case["code"], case["message"], case["status"])
    assert error.request_id == (case["request_id"] or "req_header")


def test_every_documented_code_has_a_vector_with_its_status():
    vectors = {case["code"]: case["status"] for case in CASES if case["code"] == case["name"]}
    assert vectors == documented_error_table()


def test_only_sending_paused_is_a_pause():
    paused = {case["code"] for case in CASES if case["class"] == "SendingPausedError"}
    assert paused == {"SendingPaused"}
