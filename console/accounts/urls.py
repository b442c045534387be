from django.urls import path

from console.accounts import views

app_name = "accounts"
urlpatterns = [
    path("", views.user_list, name="list"),
    path("<int:pk>/role/", views.change_role, name="role"),
]
