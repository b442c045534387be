from django.urls import path

from console.consumers.api import views

urlpatterns = [
    path(
        "consumer-groups/",
        views.ConsumerQueueListView.as_view(),
        name="api-consumer-groups",
    ),
    path(
        "consumer-groups/<str:group>/",
        views.ConsumerGroupDetailView.as_view(),
        name="api-consumer-group",
    ),
    path(
        "consumer-groups/<str:group>/reset-offset/",
        views.ResetOffsetView.as_view(),
        name="api-consumer-group-reset",
    ),
    path(
        "consumer-groups/<str:group>/settings/",
        views.GroupSettingsView.as_view(),
        name="api-consumer-group-settings",
    ),
]
