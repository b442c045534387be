from django.apps import AppConfig


class TransactionsConfig(AppConfig):
    name = "console.transactions"
    label = "transactions"
    verbose_name = "Transactions"
