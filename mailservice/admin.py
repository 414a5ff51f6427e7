from axes.admin import AccessAttemptAdmin, AccessFailureLogAdmin, AccessLogAdmin
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User

from mailservice.console import ConsoleModelAdmin

admin.site.site_header = "Mail service console"
# The pages' width goes to the lists' columns; the index and the breadcrumbs lead to every page.
admin.site.enable_nav_sidebar = False
admin.site.site_title = "Mail service console"
admin.site.index_title = "Operations"

# Django's and django-axes' own pages, with the console's lookup restriction (mailservice.console):
# without it `?password__startswith=` would read password hashes.
for model in (User, Group, AccessAttempt, AccessLog, AccessFailureLog):
    admin.site.unregister(model)


@admin.register(User)
class ConsoleUserAdmin(ConsoleModelAdmin, UserAdmin):
    pass


@admin.register(Group)
class ConsoleGroupAdmin(ConsoleModelAdmin, GroupAdmin):
    pass


@admin.register(AccessAttempt)
class ConsoleAccessAttemptAdmin(ConsoleModelAdmin, AccessAttemptAdmin):
    pass


@admin.register(AccessLog)
class ConsoleAccessLogAdmin(ConsoleModelAdmin, AccessLogAdmin):
    pass


@admin.register(AccessFailureLog)
class ConsoleAccessFailureLogAdmin(ConsoleModelAdmin, AccessFailureLogAdmin):
    pass


# The index shows the dashboard (messaging/templatetags/dashboard.py) above the model list.
admin.site.index_template = "admin/mailservice/index.html"
