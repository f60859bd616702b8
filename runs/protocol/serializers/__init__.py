"""The /v1 shapes: strict fields, requests (validated), responses (rendered)."""

from .requests import *  # noqa: F403
from .responses import *  # noqa: F403
