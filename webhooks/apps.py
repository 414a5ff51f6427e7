from django.apps import AppConfig
from django.conf import settings
from django.core.signals import request_finished


class WebhooksConfig(AppConfig):
    name = "webhooks"

    def ready(self) -> None:
        if settings.MAILSERVICE_WEBHOOK_IN_PROCESS:
            from webhooks.inprocess import request_finished_wake

            request_finished.connect(request_finished_wake, dispatch_uid="webhooks.in_process")
        from messaging.partitioning import history_follower_register, history_partition_dropping
        from webhooks.models import WebhookDelivery
        from webhooks.services import deliveries_of_dropped_events_drop

        history_follower_register(WebhookDelivery._meta.db_table, key="subject_created_at")
        history_partition_dropping.connect(deliveries_of_dropped_events_drop, dispatch_uid="webhooks.partition_drop")
