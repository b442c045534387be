from django.apps import AppConfig


class ConsumersConfig(AppConfig):
    name = "console.consumers"
    label = "consumers"
    verbose_name = "Consumer groups"
