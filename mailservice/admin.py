from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User

from mailservice.console import ConsoleModelAdmin

admin.site.site_header = "Mail service console"
admin.site.site_title = "Mail service console"
admin.site.index_title = "Operations"

# Django's own user and group pages, with the console's lookup restriction (mailservice.console):
# without it `?password__startswith=` would read password hashes.
admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class ConsoleUserAdmin(ConsoleModelAdmin, UserAdmin):
    pass


@admin.register(Group)
class ConsoleGroupAdmin(ConsoleModelAdmin, GroupAdmin):
    pass
