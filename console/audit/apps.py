from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "console.audit"
    label = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        from axes.signals import user_locked_out

        from console.audit.services import audit_lockout

        user_locked_out.connect(audit_lockout, dispatch_uid="audit_lockout")
