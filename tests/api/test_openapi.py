"""The OpenAPI document: valid 3.1, the spec's shapes and limits, and a live server that keeps to it."""

import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
from django.test import Client
from openapi_spec_validator import validate

from mailservice import mailbox
from mailservice.errors import STATUS_OF_CODE, ErrorCode
from tests.api.wire import bearer
from tests.factories import ApiKeyFactory, DomainFactory, MessageFactory, TemplateFactory, TemplateVersionFactory

MAILBOX = {"type": "string", "minLength": 3, "maxLength": 320, "pattern": mailbox.OPENAPI_PATTERN}
ADDRESS_OR_LIST = {"oneOf": [MAILBOX, {"type": "array", "items": MAILBOX, "minItems": 1, "maxItems": 50}]}
REPLY_TO = {"oneOf": [MAILBOX, {"type": "array", "items": MAILBOX, "minItems": 1, "maxItems": 10}]}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    response = Client().get("/v1/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/")
    return response.json()


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _objects(schema: Any) -> list[dict[str, Any]]:
    """Every object schema with properties, at any depth."""
    found = []
    if isinstance(schema, dict):
        if "properties" in schema:
            found.append(schema)
        for value in schema.values():
            found += _objects(value)
    elif isinstance(schema, list):
        for value in schema:
            found += _objects(value)
    return found


def test_the_document_is_valid_openapi_3_1(document):
    validate(document)
    assert document["openapi"].startswith("3.1")
    assert document["info"]["version"] == "0.1.0"


def test_operations_carry_the_spec_names_and_bearer_security(document):
    operations = {(path, method): op for path, item in document["paths"].items() for method, op in item.items()}
    assert {key: op["operationId"] for key, op in operations.items()} == {
        ("/v1/send", "post"): "send",
        ("/v1/messages", "get"): "listMessages",
        ("/v1/messages/{id}", "get"): "getMessage",
        # Additions for the links in `email.received` events (docs/webhooks.md).
        ("/v1/messages/{id}/raw", "get"): "getMessageRaw",
        ("/v1/messages/{id}/attachments/{index}", "get"): "getMessageAttachment",
        # Many sends in one request (docs/api.md).
        ("/v1/send/batch", "post"): "sendBatch",
        # The application's view of suppressions and events (docs/api.md).
        ("/v1/suppressions", "get"): "listSuppressions",
        ("/v1/suppressions/{email}", "get"): "getSuppression",
        ("/v1/suppressions/{email}", "put"): "addSuppression",
        ("/v1/suppressions/{email}", "delete"): "removeSuppression",
        ("/v1/messages/{id}/events", "get"): "listMessageEvents",
        ("/v1/events", "get"): "listEvents",
    }
    assert document["components"]["securitySchemes"] == {
        "bearerAuth": {"type": "http", "scheme": "bearer", "description": "A domain API key"}
    }
    assert all(op["security"] == [{"bearerAuth": []}] for op in operations.values())


@pytest.mark.parametrize(
    ("path", "method", "statuses"),
    [
        ("/v1/send", "post", {"400", "401", "403", "409", "413", "429", "503"}),
        ("/v1/send/batch", "post", {"400", "401", "403", "409", "413", "429", "503"}),
        ("/v1/messages", "get", {"400", "401", "403", "429", "503"}),
        ("/v1/messages/{id}", "get", {"400", "401", "403", "404", "429", "503"}),
    ],
)
def test_each_operation_documents_its_error_responses_as_api_error(document, path, method, statuses):
    responses = document["paths"][path][method]["responses"]
    assert set(responses) == {"200"} | statuses
    for status in statuses:
        assert responses[status]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ApiError"}
        assert responses[status]["description"]


def test_every_operation_has_a_summary_and_an_example_for_each_body_and_each_error(document):
    for item in document["paths"].values():
        for operation in item.values():
            assert operation["summary"] and operation["description"]
            if "requestBody" in operation:
                assert operation["requestBody"]["content"]["application/json"]["examples"]
            for status, response in operation["responses"].items():
                if status == "204":  # no content: a removal
                    assert "content" not in response, operation["operationId"]
                    continue
                if "application/json" not in response["content"]:  # a byte stream: a source, an attachment
                    assert status == "200", (operation["operationId"], status)
                    continue
                examples = response["content"]["application/json"]["examples"]
                assert examples, (operation["operationId"], status)
                if status != "200":
                    codes = [example["value"]["error"]["code"] for example in examples.values()]
                    assert all(STATUS_OF_CODE[ErrorCode(code)] == int(status) for code in codes)
                    assert all(f"`{code}`" in response["description"] for code in codes)


def test_the_read_operations_do_not_list_the_send_errors(document):
    for path in ("/v1/messages", "/v1/messages/{id}"):
        responses = document["paths"][path]["get"]["responses"]
        codes = {
            example["value"]["error"]["code"]
            for status, response in responses.items()
            if status != "200"
            for example in response["content"]["application/json"]["examples"].values()
        }
        assert not codes & {"SenderNotAllowed", "SendingPaused", "AllowanceExhausted", "RequestTooLarge"}


@pytest.mark.django_db
def test_try_it_out_with_the_send_examples_succeeds_for_the_demo_domain(document):
    """Swagger UI's "Try it out" sends an example as it is; with the demo key authorized it is a 200."""
    domain = DomainFactory(name="demo.example")
    api_key = ApiKeyFactory(domain=domain)
    TemplateVersionFactory(template=TemplateFactory(domain=domain, slug="welcome"))
    examples = document["paths"]["/v1/send"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    for example in examples.values():
        response = Client().post("/v1/send", example["value"], content_type="application/json", headers=bearer(api_key))
        assert response.status_code == 200, response.content


@pytest.mark.django_db
def test_the_batch_example_succeeds_for_the_demo_domain(document):
    domain = DomainFactory(name="demo.example")
    api_key = ApiKeyFactory(domain=domain)
    TemplateVersionFactory(template=TemplateFactory(domain=domain, slug="welcome"))
    examples = document["paths"]["/v1/send/batch"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    for example in examples.values():
        response = Client().post(
            "/v1/send/batch", example["value"], content_type="application/json", headers=bearer(api_key)
        )
        assert response.status_code == 200, response.content
        assert len(response.json()["data"]) == len(example["value"]["messages"])


def test_a_batch_is_a_list_of_send_requests(document):
    body = document["paths"]["/v1/send/batch"]["post"]["requestBody"]
    batch = _resolve(document, body["content"]["application/json"]["schema"])
    assert batch["required"] == ["messages"]
    assert batch["properties"]["messages"] == {
        "type": "array",
        "items": document["paths"]["/v1/send"]["post"]["requestBody"]["content"]["application/json"]["schema"],
        "minItems": 1,
        "maxItems": 500,
    }


def test_every_object_is_closed(document):
    objects = _objects(document["components"]) + _objects(document["paths"])
    # ApiError, its detail, the two send variants, TemplateReference, 3 responses, the batch's request
    # and response; then the webhooks section's 9 events and the 10 shapes they use (domain.dmarc_report's
    # data and its sources, and the failure events' data among them); then a suppression, a page of them and
    # PUT's body, a message's events and a page of events.
    assert len(objects) == 10 + 19 + 5
    assert all(schema.get("additionalProperties") is False for schema in objects), [
        sorted(schema["properties"]) for schema in objects if schema.get("additionalProperties") is not False
    ]


def test_send_is_one_of_the_two_variants_with_the_spec_limits(document):
    body = document["paths"]["/v1/send"]["post"]["requestBody"]
    assert body["required"] is True
    send = _resolve(document, body["content"]["application/json"]["schema"])
    inline, template = (_resolve(document, variant) for variant in send["oneOf"])
    recipients = {"anyOf": [{"required": ["to"]}, {"required": ["cc"]}, {"required": ["bcc"]}]}

    assert sorted(inline["required"]) == ["from", "subject"]
    assert inline["allOf"] == [recipients, {"anyOf": [{"required": ["text"]}, {"required": ["html"]}]}]
    assert inline["properties"] == {
        "from": MAILBOX,
        "to": ADDRESS_OR_LIST,
        "cc": ADDRESS_OR_LIST,
        "bcc": ADDRESS_OR_LIST,
        "replyTo": REPLY_TO,
        "subject": {"type": "string", "maxLength": 100000},
        "text": {"type": "string", "maxLength": 100000},
        "html": {"type": "string", "maxLength": 100000},
    }
    assert sorted(template["required"]) == ["from", "template"]
    assert template["allOf"] == [recipients]
    reference = _resolve(document, template["properties"].pop("template"))
    assert template["properties"] == {
        "from": MAILBOX,
        "to": ADDRESS_OR_LIST,
        "cc": ADDRESS_OR_LIST,
        "bcc": ADDRESS_OR_LIST,
        "replyTo": REPLY_TO,
        "subject": {"type": "string", "maxLength": 1000},
    }
    assert reference["required"] == ["id"]
    assert reference["properties"]["id"]["pattern"] == "^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$"
    assert reference["properties"]["id"]["maxLength"] == 100
    assert reference["properties"]["version"] == {"type": "integer", "minimum": 1}
    assert reference["properties"]["variables"] == {
        "type": "object",
        "maxProperties": 50,
        "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_]{0,49}$"},
        "additionalProperties": {
            "oneOf": [
                {"type": "string", "maxLength": 2000},
                {"type": "number", "minimum": -9007199254740991, "maximum": 9007199254740991},
                {"type": "boolean"},
            ]
        },
    }


def test_the_mailbox_pattern_is_the_grammar_the_server_applies():
    pattern = re.compile(mailbox.OPENAPI_PATTERN)
    examples = (
        "a@b.co",
        "Bob <b@e.org>",
        "b@e",
        "Bob<b@e.org>",
        "a b@e.org",
        "B\r <b@e.org>",
        "a\x1c@e.org",
        "a\ufeff@e.org",
    )
    for value in examples:
        assert bool(pattern.fullmatch(value)) == mailbox.is_mailbox(value), value
    assert "\\s" not in mailbox.OPENAPI_PATTERN  # \s differs between Python and ECMA-262


def test_response_shapes_match_the_spec(document):
    schemas = document["components"]["schemas"]
    message, listing = schemas["Message"], schemas["MessageList"]
    assert (
        sorted(message["required"])
        == sorted(message["properties"])
        == sorted(["id", "domain_id", "direction", "from", "to", "subject", "status", "created_at", "text"])
    )
    assert message["properties"]["text"]["type"] == ["string", "null"]
    assert message["properties"]["id"]["minLength"] == message["properties"]["domain_id"]["minLength"] == 1
    assert message["properties"]["status"]["enum"] == [
        "accepted",
        "delivered",
        "received",
        "bounced",
        "complained",
        "failed",
    ]
    assert message["properties"]["direction"]["enum"] == ["sent", "received"]
    assert message["properties"]["created_at"] == {"type": "string", "format": "date-time"}
    assert sorted(listing["required"]) == ["data", "has_more", "next_cursor"]
    assert listing["properties"]["next_cursor"]["type"] == ["string", "null"]
    assert sorted(schemas["SendResponse"]["required"]) == ["created_at", "id"]
    error = _resolve(document, schemas["ApiError"]["properties"]["error"])
    assert schemas["ApiError"]["required"] == ["error"]
    assert sorted(error["required"]) == ["code", "message", "request_id"]
    assert error["properties"]["code"]["minLength"] == error["properties"]["request_id"]["minLength"] == 1


def test_query_and_path_parameters_carry_their_limits(document):
    listing = {p["name"]: p["schema"] for p in document["paths"]["/v1/messages"]["get"]["parameters"]}
    assert listing == {
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        "after": {"type": "string", "minLength": 1, "maxLength": 512},
        "direction": {"type": "string", "enum": ["sent", "received"]},
    }
    (message_id,) = document["paths"]["/v1/messages/{id}"]["get"]["parameters"]
    assert (message_id["in"], message_id["schema"]) == ("path", {"type": "string", "minLength": 1, "maxLength": 256})


def test_the_docs_page_works_offline():
    client = Client()
    page = client.get("/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert any(asset.endswith(".js") for asset in assets) and any(asset.endswith(".css") for asset in assets)
    assert not re.search(r"https?://", html), "the docs page refers to another site"
    for asset in assets:
        response = client.get(urljoin("/docs/", asset))
        assert response.status_code == 200, asset
        assert b"".join(response.streaming_content) if response.streaming else response.content
    assert 'url: "/v1/openapi.json"' in html
    # Swagger UI's default would send the document's address to validator.swagger.io.
    assert '"validatorUrl": null' in html


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_property_based_run_finds_no_server_error_and_no_response_off_its_schema(
    live_url, full_key, domain, tmp_path
):
    """schemathesis generates valid and invalid requests from the document; every answer must conform."""
    MessageFactory(domain=domain)
    TemplateVersionFactory(template=TemplateFactory(domain=domain, slug="0"), number=1, text="x", html="")
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "schemathesis"),
            "run",
            f"{live_url}/v1/openapi.json",
            "--header",
            f"Authorization: {bearer(full_key)['Authorization']}",
            "--phases",
            "examples,fuzzing",
            "--max-examples",
            "25",
            "--seed",
            "20261120",
            "--workers",
            "2",
            "--suppress-health-check",
            "all",
            # Every check but "a schema-valid request is accepted": the document cannot know which
            # templates exist or which cursors were issued, so such 400s are correct answers.
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
        ],
        cwd=tmp_path,  # schemathesis keeps a crash cache in its working directory
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_concurrent_first_requests_get_one_document_generated_once(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from drf_spectacular.generators import SchemaGenerator

    from mailservice.api.views import OpenApiDocumentView

    monkeypatch.setattr(OpenApiDocumentView, "_generated", None)  # as in a process that has not served it yet
    generated, generate = [], SchemaGenerator.get_schema
    monkeypatch.setattr(SchemaGenerator, "get_schema", lambda *a, **k: generated.append(1) or generate(*a, **k))
    together = Barrier(8)

    def fetch(_: int) -> tuple[int, bytes]:
        together.wait()
        response = Client().get("/v1/openapi.json")
        return response.status_code, response.content

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(fetch, range(8)))
    assert {status for status, _ in responses} == {200}
    assert len({body for _, body in responses}) == 1
    assert len(generated) == 1
