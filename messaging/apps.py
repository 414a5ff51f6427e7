from django.apps import AppConfig


class MessagingConfig(AppConfig):
    name = "messaging"

    def ready(self) -> None:
        from django.conf import settings

        from messaging.outbound.transports import RelayConfig

        # A mistyped EMAIL_URL stops the web server and the worker at start, not at the first send.
        if settings.EMAIL_URL:
            RelayConfig.from_url(settings.EMAIL_URL)
