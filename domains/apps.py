from django.apps import AppConfig


class DomainsConfig(AppConfig):
    name = "domains"
