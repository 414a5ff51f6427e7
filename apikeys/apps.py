from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class ApikeysConfig(AppConfig):
    name = "apikeys"
    verbose_name = "API keys"

    def ready(self) -> None:
        from apikeys.cache import keys_changed
        from apikeys.models import ApiKey
        from domains.models import Domain

        # A web process caches keys with their domain: any change to either starts a new version.
        for model in (ApiKey, Domain):
            post_save.connect(keys_changed, sender=model, dispatch_uid=f"apikeys-cache-{model.__name__}")
            post_delete.connect(keys_changed, sender=model, dispatch_uid=f"apikeys-cache-delete-{model.__name__}")
