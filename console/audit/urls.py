from django.urls import path

from console.audit import views

app_name = "audit"
urlpatterns = [
    path("", views.audit_list, name="list"),
    path("export.csv", views.audit_export, name="export"),
    path("<int:pk>/", views.audit_detail, name="detail"),
]
