from django.urls import path

from console.cluster import views

app_name = "cluster"
urlpatterns = [
    path("", views.cluster, name="overview"),
    path("topics/", views.topic, name="topic"),
    path(
        "<str:node>/halves/<str:transaction_id>/<str:verb>/",
        views.decide,
        name="decide",
    ),
]
