from django.urls import path

from console.consumers import views

app_name = "consumers"
urlpatterns = [
    path("", views.group_list, name="list"),
    path("<str:group>/", views.group_detail, name="detail"),
    path("<str:group>/reset/preview/", views.reset_preview, name="reset-preview"),
    path("<str:group>/reset/", views.reset_offsets, name="reset"),
    path("<str:group>/settings/", views.update_settings, name="settings"),
    path("<str:group>/dead-letters/", views.dead_letters, name="dead-letters"),
    path(
        "<str:group>/dead-letters/resend/",
        views.resend_dead_letters,
        name="dead-letters-resend",
    ),
]
