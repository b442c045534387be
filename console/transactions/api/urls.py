from django.urls import path

from console.transactions.api import views

urlpatterns = [
    path("transactions/", views.TransactionListView.as_view(), name="api-transactions"),
    path(
        "transactions/bulk-rollback/",
        views.BulkRollbackView.as_view(),
        name="api-transactions-bulk-rollback",
    ),
    path(
        "transactions/<str:transaction_id>/",
        views.TransactionDetailView.as_view(),
        name="api-transaction",
    ),
    path(
        "transactions/<str:transaction_id>/commit/",
        views.CommitView.as_view(),
        name="api-transaction-commit",
    ),
    path(
        "transactions/<str:transaction_id>/rollback/",
        views.RollbackView.as_view(),
        name="api-transaction-rollback",
    ),
    path(
        "transactions/<str:transaction_id>/resume/",
        views.ResumeView.as_view(),
        name="api-transaction-resume",
    ),
]
