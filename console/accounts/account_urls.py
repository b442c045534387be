from django.urls import path

from console.accounts import views

app_name = "account"
urlpatterns = [path("", views.my_account, name="me")]
