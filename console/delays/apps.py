from django.apps import AppConfig


class DelaysConfig(AppConfig):
    name = "console.delays"
    label = "delays"
    verbose_name = "Delay queues"
