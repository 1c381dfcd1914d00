"""ASGI entry point: HTTP through Django, websockets through Channels (docs/architecture.md "Routes").

Served by daphne: ``daphne project.asgi:application``.
"""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from jxai_app.tools.mcp import StartOnFirstRequest  # noqa: E402
from jxai_app.routing import websocket_urlpatterns  # noqa: E402
from jxai_app.web.origin import SameOriginValidator  # noqa: E402

application = StartOnFirstRequest(ProtocolTypeRouter(  # MCP sessions open at the first request (docs/mcp.md)
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
))

# Everything imported so far lives as long as the process: move it out of the collector's
# reach, so a full collection scans only what requests and turns allocate (measured under
# daphne: one ~40 ms full collection per ~100 turns without this, which lands on the time to
# first token).
gc.collect()
gc.freeze()
