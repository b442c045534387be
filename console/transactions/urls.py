from django.urls import path

from console.transactions import views

app_name = "transactions"
urlpatterns = [
    path("", views.pending_list, name="list"),
    path("discarded/", views.discarded_list, name="discarded"),
    path("bulk-rollback/", views.bulk_rollback, name="bulk-rollback"),
    path("<str:transaction_id>/", views.half_detail, name="detail"),
    # One view for commit, rollback and resume (services.VERBS); the names
    # stay per verb for the templates.
    *(
        path(f"<str:transaction_id>/{verb}/", views.act, {"verb": verb}, name=verb)
        for verb in ("commit", "rollback", "resume")
    ),
]
