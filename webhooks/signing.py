"""Standard Webhooks request headers, signed with the `standardwebhooks` package itself."""

from datetime import datetime

from standardwebhooks import Webhook


def signature_headers(*, event_id: str, timestamp: datetime, body: str, secrets: list[str]) -> dict[str, str]:
    """The three headers; one `v1,<signature>` per secret, space-separated (during a rotation, two)."""
    signatures = " ".join(Webhook(secret).sign(event_id, timestamp, body) for secret in secrets)
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": signatures,
    }
