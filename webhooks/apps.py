from django.apps import AppConfig
from django.conf import settings
from django.core.signals import request_finished


class WebhooksConfig(AppConfig):
    name = "webhooks"

    def ready(self) -> None:
        if settings.MAILSERVICE_WEBHOOK_IN_PROCESS:
            from webhooks.inprocess import request_finished_wake

            request_finished.connect(request_finished_wake, dispatch_uid="webhooks.in_process")
        from messaging.partitioning import history_partition_dropping
        from webhooks.services import deliveries_of_dropped_events_delete

        history_partition_dropping.connect(deliveries_of_dropped_events_delete, dispatch_uid="webhooks.partition_drop")
