"""The admin app, serving harbor_site.admin_site.HarborAdminSite as `admin.site`."""

from django.contrib.admin.apps import AdminConfig


class HarborAdminConfig(AdminConfig):
    default_site = "harbor_site.admin_site.HarborAdminSite"
