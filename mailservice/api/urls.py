from django.urls import path

from mailservice.api import views

urlpatterns = [
    path("send", views.SendView.as_view(), name="send"),
    path("send/batch", views.SendBatchView.as_view(), name="send-batch"),
    path("messages", views.MessageListView.as_view(), name="message-list"),
    path("messages/<str:id>", views.MessageDetailView.as_view(), name="message-detail"),
    path("messages/<str:id>/raw", views.MessageRawView.as_view(), name="message-raw"),
    path("messages/<str:id>/attachments/<int:index>", views.MessageAttachmentView.as_view(), name="message-attachment"),
    path("openapi.json", views.OpenApiDocumentView.as_view(), name="openapi"),
]
