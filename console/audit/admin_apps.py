"""``django.contrib.admin`` with the audited site (console/audit/admin_site.py);
a module of its own: app configs may not import models."""

from django.contrib.admin.apps import AdminConfig


class AuditedAdminConfig(AdminConfig):
    default_site = "console.audit.admin_site.AuditedAdminSite"
