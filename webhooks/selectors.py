from django.db.models import QuerySet

from domains.models import Domain
from webhooks.models import WebhookEndpoint


def endpoint_list(*, domain: Domain | None) -> QuerySet[WebhookEndpoint]:
    endpoints = WebhookEndpoint.objects.select_related("domain").order_by("domain__name", "created_at")
    return endpoints.filter(domain=domain) if domain is not None else endpoints
