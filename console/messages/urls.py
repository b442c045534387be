from django.urls import path

from console.messages import views

app_name = "messages"
urlpatterns = [
    path("", views.message_search, name="search"),
    path("<str:msg_id>/", views.message_detail, name="detail"),
    path("<str:msg_id>/resend/", views.message_resend, name="resend"),
]
