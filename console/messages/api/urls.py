from django.urls import path

from console.messages.api import views

urlpatterns = [
    path(
        "messages/search/", views.MessageSearchView.as_view(), name="api-message-search"
    ),
    path(
        "messages/<str:msg_id>/", views.MessageDetailView.as_view(), name="api-message"
    ),
    path(
        "messages/<str:msg_id>/resend/",
        views.MessageResendView.as_view(),
        name="api-message-resend",
    ),
]
