from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "console.reports"
    label = "reports"
    verbose_name = "Spark reports"
