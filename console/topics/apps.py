from django.apps import AppConfig


class TopicsConfig(AppConfig):
    name = "console.topics"
    label = "topics"
    verbose_name = "Topics, messages and consumer groups"
