"""The console's custom permissions and the "support" group.

Support staff read messages, domains, suppressions and templates, and may pause sending in an
emergency; they cannot create or change API keys and cannot lift a pause. Permissions are
created here (not left to post_migrate, which runs after every migration) so the group can
hold them on a fresh database.
"""

from django.db import migrations

SUPPORT_GROUP = "support"
CUSTOM = [
    ("domains", "domain", "pause_sending", "Can pause sending (a domain or all sending)"),
    ("domains", "domain", "resume_sending", "Can lift a sending pause"),
]
SUPPORT_VIEWS = [
    ("domains", "domain"),
    ("messaging", "message"),
    ("messaging", "messageevent"),
    ("messaging", "suppression"),
    ("templates_app", "template"),
    ("templates_app", "templateversion"),
]


def _permission(apps, app_label, model, codename, name):
    content_type, _ = apps.get_model("contenttypes", "ContentType").objects.get_or_create(
        app_label=app_label, model=model
    )
    permission, _ = apps.get_model("auth", "Permission").objects.get_or_create(
        content_type=content_type, codename=codename, defaults={"name": name}
    )
    return permission


def create_support_group(apps, schema_editor):
    custom = [_permission(apps, *spec) for spec in CUSTOM]
    views = [
        _permission(apps, app_label, model, f"view_{model}", f"Can view {apps.get_model(app_label, model)._meta.verbose_name}")
        for app_label, model in SUPPORT_VIEWS
    ]
    group, _ = apps.get_model("auth", "Group").objects.get_or_create(name=SUPPORT_GROUP)
    group.permissions.add(*views, custom[0])


def remove_support_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=SUPPORT_GROUP).delete()
    apps.get_model("auth", "Permission").objects.filter(
        content_type__app_label="domains", codename__in=[codename for _, _, codename, _ in CUSTOM]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("domains", "0001_initial"),
        ("apikeys", "0001_initial"),
        ("templates_app", "0001_initial"),
        ("messaging", "0001_initial"),
    ]

    operations = [migrations.RunPython(create_support_group, remove_support_group)]
