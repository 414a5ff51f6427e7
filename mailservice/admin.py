from django.contrib import admin

admin.site.site_header = "Mail service console"
admin.site.site_title = "Mail service console"
admin.site.index_title = "Operations"
# The index shows the dashboard (mailservice/templatetags/dashboard.py) above the model list.
admin.site.index_template = "admin/mailservice/index.html"
