from django.apps import AppConfig


class MailserviceConfig(AppConfig):
    name = "mailservice"
    verbose_name = "Mail service API"
