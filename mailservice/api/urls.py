from django.urls import path, re_path

from mailservice.api import views

urlpatterns = [
    path("send", views.SendView.as_view(), name="send"),
    path("send/batch", views.SendBatchView.as_view(), name="send-batch"),
    path("messages", views.MessageListView.as_view(), name="message-list"),
    path("messages/<str:id>", views.MessageDetailView.as_view(), name="message-detail"),
    path("messages/<str:id>/events", views.MessageEventsView.as_view(), name="message-events"),
    path("messages/<str:id>/raw", views.MessageRawView.as_view(), name="message-raw"),
    path("messages/<str:id>/attachments/<int:index>", views.MessageAttachmentView.as_view(), name="message-attachment"),
    path("events", views.EventListView.as_view(), name="event-list"),
    path("suppressions", views.SuppressionListView.as_view(), name="suppression-list"),
    # Anything after the slash, `/` (an address may hold one, sent as %2F) and CR or LF included: api_address
    # judges it, so a hostile address is a ValidationError rather than a route that does not exist.
    re_path(r"^suppressions/(?P<email>(?s:.+))\Z", views.SuppressionDetailView.as_view(), name="suppression-detail"),
    path("openapi.json", views.OpenApiDocumentView.as_view(), name="openapi"),
]
