from django.urls import path

from console.topics import views

app_name = "topics"
urlpatterns = [
    path("", views.topic_list, name="list"),
    path("new/", views.topic_create, name="create"),
    path("<str:name>/", views.topic_detail, name="detail"),
    path("<str:name>/edit/", views.topic_edit, name="edit"),
    path("<str:name>/delete/", views.topic_delete, name="delete"),
    path("<str:name>/send/", views.message_send, name="send"),
    path("<str:name>/queues/<int:queue_id>/", views.queue_browse, name="queue"),
]
