from django.urls import path

from labs.consumers import SessionUpdatesConsumer

websocket_urlpatterns = [path("ws/sessions/", SessionUpdatesConsumer.as_asgi())]
