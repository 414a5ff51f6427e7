"""What API tests share: request bodies, headers, and the one error envelope every failure must use."""

from typing import Any

from apikeys.models import ApiKey

OMIT = object()  # drop this field from the body


def bearer(api_key: ApiKey) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key.secret}"}


def inline_body(**changes: Any) -> dict[str, Any]:
    """A valid inline send from the `domain` persona (acme.example.com), with changes applied."""
    body = {"from": "Acme <hello@acme.example.com>", "to": "bob@example.org", "subject": "Hi", "text": "Hello"}
    body.update(changes)
    return {name: value for name, value in body.items() if value is not OMIT}


def template_body(template: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return inline_body(**{"subject": OMIT, "text": OMIT, **changes, "template": template})


def assert_api_error(response: Any, status: int, code: str) -> dict[str, str]:
    """The response is exactly the spec's ApiError, its request id is the header's; returns `error`."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    headers = response.headers  # case-insensitive for httpx and for Django's test client alike
    assert headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "request_id"}
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["request_id"] and error["request_id"] == headers["x-request-id"]
    assert headers["cache-control"] == "no-store"
    assert "Traceback" not in response.content.decode(errors="replace")
    return error


def page_items(response: Any, field: str = "id") -> list[str]:
    """`field` of each item of a 200 list page (`{"data": [...], "has_more", "next_cursor"}`)."""
    assert response.status_code == 200, response.json()
    return [item[field] for item in response.json()["data"]]


def all_pages(api: Any, path: str, field: str = "id", **params: str) -> list[str]:
    """Every page of a keyset-paged list, each `after` the previous page's `next_cursor`: the items' `field`
    in order, checking on each page that `has_more` says whether a cursor follows."""
    seen: list[str] = []
    after = None
    while True:
        response = api.get(path, {**params, **({"after": after} if after else {})})
        seen += page_items(response, field)
        after = response.json()["next_cursor"]
        assert response.json()["has_more"] is (after is not None)
        if after is None:
            return seen
