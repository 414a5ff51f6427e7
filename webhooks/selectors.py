from django.db.models import QuerySet

from domains.models import Domain
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint


def endpoint_list(*, domain: Domain | None) -> QuerySet[WebhookEndpoint]:
    endpoints = WebhookEndpoint.objects.select_related("domain").order_by("domain__name", "created_at")
    return endpoints.filter(domain=domain) if domain is not None else endpoints


def endpoint_failed_deliveries(*, endpoint: WebhookEndpoint, limit: int) -> list[WebhookDelivery]:
    """The endpoint's deliveries that gave up, newest first: the console's endpoint page.

    webhook_delivery_failed_idx serves it: a few failed among many deliveries."""
    failed = endpoint.deliveries.filter(status=DeliveryStatus.FAILED).order_by("-created_at", "-id")
    return list(failed[:limit])
