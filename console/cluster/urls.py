from django.urls import path

from console.cluster import picker, views

app_name = "cluster"
urlpatterns = [
    path("", views.cluster, name="overview"),
    path("pick/", picker.pick, name="pick"),
    path("topics/", views.topic, name="topic"),
    path("consumers/reset/", views.reset, name="reset"),
    path("delays/cancel/", views.cancel, name="cancel"),
    path("nodes/<str:node>/", views.node_page, name="node"),
    path("nodes/<str:node>/promote/", views.promote, name="promote"),
    path(
        "<str:node>/halves/<str:transaction_id>/<str:verb>/",
        views.decide,
        name="decide",
    ),
]
