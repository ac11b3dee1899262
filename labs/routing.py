from django.urls import path

from labs.consumers import ClusterConsumer, SessionUpdatesConsumer

websocket_urlpatterns = [
    path("ws/sessions/", SessionUpdatesConsumer.as_asgi()),
    path("ws/cluster/", ClusterConsumer.as_asgi()),
]
