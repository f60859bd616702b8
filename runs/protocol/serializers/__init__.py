"""The /v1 shapes: strict fields, requests (validated), responses (rendered)."""

from .fields import *  # noqa: F403
from .requests import *  # noqa: F403
from .responses import *  # noqa: F403
