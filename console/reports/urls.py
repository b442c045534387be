from django.urls import path

from console.reports import views

app_name = "reports"
urlpatterns = [
    path("", views.report_list, name="list"),
    path("<str:name>/", views.report_detail, name="detail"),
    path("<str:name>/run/", views.run_now, name="run"),
    path("<str:name>/schedule/", views.schedule, name="schedule"),
    path(
        "<str:name>/runs/<int:run_id>/<str:table>.csv",
        views.download_csv,
        name="csv",
    ),
    path(
        "<str:name>/runs/<int:run_id>/<str:table>.jsonl",
        views.download_json,
        name="json",
    ),
    path(
        "<str:name>/runs/<int:run_id>/<str:table>.parquet",
        views.download_parquet,
        name="parquet",
    ),
]
