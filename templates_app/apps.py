from django.apps import AppConfig


class TemplatesAppConfig(AppConfig):
    name = "templates_app"
    verbose_name = "Templates"
