from django.apps import AppConfig


class MessagesConfig(AppConfig):
    name = "console.messages"
    label = "broker_messages"
    verbose_name = "Messages"
