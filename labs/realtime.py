"""The message types a page's websocket consumer (``labs.consumers``) is sent over the channel layer.

``RESUBSCRIBED`` comes from the project's channel layer (``portal.channel_layer``) when its Redis
subscription is back after a loss: the consumer tells its page to read again what it shows. It is
defined here, below both, so that the app never imports the project.
"""

RESUBSCRIBED = "layer.resubscribed"  # a message type; its handler is ``layer_resubscribed``
