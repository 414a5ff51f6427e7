from django.apps import AppConfig


class MessagingConfig(AppConfig):
    name = "messaging"

    def ready(self) -> None:
        from django.conf import settings

        from messaging.outbound.direct.transport import validate_mx_url
        from messaging.outbound.smtp_client import RelayConfig
        from messaging.outbound.transports import is_direct_delivery

        # A mistyped EMAIL_URL stops the web server and the worker at start, not at the first send.
        if settings.EMAIL_URL and is_direct_delivery(settings.EMAIL_URL):
            validate_mx_url(settings.EMAIL_URL)
        elif settings.EMAIL_URL:
            RelayConfig.from_url(settings.EMAIL_URL)
