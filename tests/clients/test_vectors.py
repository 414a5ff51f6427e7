"""The shared test vectors (clients/test-vectors.json), run against the Python client and the server.

The JS suite runs the same file (clients/js/test/vectors.test.mjs), so both languages translate
every style identically; the server checks below keep the clients' local validation in step
with the server's own.
"""

from typing import Any

import pytest
from mailservice_client import ValidationError
from mailservice_client._validate import check_send
from mailservice_client.compat import boto3, postmark, resend, sendgrid
from rest_framework.exceptions import ValidationError as DrfValidationError

from mailservice.api.serializers import parse_send_request
from mailservice.errors import ApiError
from tests.clients.vectors import case_id, expand, vector_cases

TRANSLATE = {
    "native": check_send,
    "sesv2": lambda params: boto3.to_send_request(**params),
    "postmark": postmark.to_send_request,
    "resend": resend.to_send_request,
    "sendgrid": sendgrid.to_send_request,
}
CASES = vector_cases("python")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_python_client_translates_each_vector(case: dict[str, Any]):
    params = expand(case["input"])
    if "request" in case:
        assert TRANSLATE[case["style"]](params) == expand(case["request"])
    else:
        with pytest.raises(ValidationError) as raised:
            TRANSLATE[case["style"]](params)
        assert raised.value.field == case["error"]["field"], raised.value.message


@pytest.mark.parametrize("case", [case for case in CASES if "request" in case], ids=case_id)
def test_the_server_accepts_every_request_a_client_builds(case: dict[str, Any]):
    parse_send_request(expand(case["request"]))


@pytest.mark.parametrize("case", [case for case in CASES if case["style"] == "native" and "error" in case], ids=case_id)
def test_the_server_rejects_what_the_clients_reject_locally(case: dict[str, Any]):
    with pytest.raises((DrfValidationError, ApiError)) as raised:
        parse_send_request(expand(case["input"]))
    field = case["error"]["field"].split("[")[0].split(".")[0]
    assert field in str(raised.value.detail if isinstance(raised.value, DrfValidationError) else raised.value.message)
