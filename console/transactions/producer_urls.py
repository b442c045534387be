from django.urls import path

from console.transactions import producer_views as views

app_name = "producers"
urlpatterns = [
    path("", views.group_list, name="list"),
    path("<str:group>/", views.group_detail, name="detail"),
    path("<str:group>/checker/", views.configure, name="configure"),
    path("<str:group>/checker/remove/", views.remove, name="remove"),
]
