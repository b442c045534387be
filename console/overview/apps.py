from django.apps import AppConfig


class OverviewConfig(AppConfig):
    """The overview page: what an operator checks first, drawn from every
    domain app (it sits above them; ``ui`` stays the shared foundation)."""

    name = "console.overview"
    label = "overview"
    verbose_name = "Overview"
