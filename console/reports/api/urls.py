from django.urls import path

from console.reports.api import views

urlpatterns = [
    path("reports/", views.ReportListView.as_view(), name="api-reports"),
    path(
        "reports/<str:name>/run/", views.RunNowView.as_view(), name="api-report-run-now"
    ),
    path(
        "report-runs/<int:pk>/trend/",
        views.RunTrendView.as_view(),
        name="api-report-run-trend",
    ),
    path("report-runs/", views.RunListView.as_view(), name="api-report-runs"),
    path("report-runs/<int:pk>/", views.RunDetailView.as_view(), name="api-report-run"),
]
