from django.urls import path

from console.delays import views

app_name = "delays"
urlpatterns = [
    path("", views.level_list, name="list"),
    path("scheduled/", views.scheduled_list, name="scheduled"),
    path("scheduled/<str:msg_id>/cancel/", views.cancel, name="cancel"),
]
