from django.urls import path

from console.delays.api import views

urlpatterns = [
    path("delay-levels/", views.DelayLevelsView.as_view(), name="api-delay-levels"),
    path(
        "delay-scheduled/",
        views.ScheduledListView.as_view(),
        name="api-delay-scheduled",
    ),
    path(
        "delay-scheduled/<str:msg_id>/cancel/",
        views.CancelView.as_view(),
        name="api-delay-cancel",
    ),
]
