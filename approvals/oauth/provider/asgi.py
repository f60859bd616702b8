"""The demo provider's ASGI application (served by Daphne, in its own process)."""

import os

from django.core.asgi import get_asgi_application

os.environ["DJANGO_SETTINGS_MODULE"] = "approvals.oauth.provider.settings"
application = get_asgi_application()
