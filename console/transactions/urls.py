from django.urls import path

from console.transactions import views

app_name = "transactions"
urlpatterns = [
    path("", views.pending_list, name="list"),
    path("discarded/", views.discarded_list, name="discarded"),
    path("bulk-rollback/", views.bulk_rollback, name="bulk-rollback"),
    path("<str:transaction_id>/", views.half_detail, name="detail"),
    path("<str:transaction_id>/rollback/", views.rollback, name="rollback"),
    path("<str:transaction_id>/commit/", views.commit, name="commit"),
    path("<str:transaction_id>/resume/", views.resume, name="resume"),
]
