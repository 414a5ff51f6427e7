from django.apps import AppConfig


class MailserviceConfig(AppConfig):
    name = "mailservice"
    verbose_name = "Mail service API"

    def ready(self) -> None:
        from mailservice import checks  # noqa: F401 - registers the system checks
