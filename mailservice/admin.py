from django.contrib import admin

admin.site.site_header = "Mail service console"
admin.site.site_title = "Mail service console"
admin.site.index_title = "Operations"
