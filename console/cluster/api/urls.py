from django.urls import path

from console.cluster.api import views

urlpatterns = [
    path("cluster/", views.ClusterView.as_view(), name="api-cluster"),
    path(
        "cluster/nodes/<str:key>/",
        views.ClusterNodeView.as_view(),
        name="api-cluster-node",
    ),
]
