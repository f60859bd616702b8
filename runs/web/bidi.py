"""Bidirectional control characters made visible in every page.

A right-to-left override (U+202E) in a goal, a question, an argument or a reason reorders
what an approver reads: `deploy to staging‮noitcudorp` reads as another target than it
names. The pages show whatever a run or a person wrote, so rather than trust every template
(and the admin's) to filter each field, every HTML page has these characters replaced with
a visible `[U+202E]` on the way out. The live pages' script does the same to what it
renders from a frame (static/harbor/harbor.js)."""

from django.http import HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

# The embeddings, overrides and isolates, the implicit marks, and the Arabic letter mark.
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
_SHOWN = {ord(char): f"[U+{ord(char):04X}]" for char in BIDI_CONTROLS}
_ENCODED = tuple(char.encode() for char in BIDI_CONTROLS)


def neutralise(text: str) -> str:
    return text.translate(_SHOWN)


class BidiControlsShown(MiddlewareMixin):
    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if response.streaming or not response.get("Content-Type", "").startswith("text/html"):
            return response
        charset = response.charset or "utf-8"
        if charset.lower().replace("-", "") == "utf8" and not any(seq in response.content for seq in _ENCODED):
            return response  # the usual page: nothing to replace, nothing decoded
        response.content = neutralise(response.content.decode(charset, errors="replace")).encode(charset)
        if response.has_header("Content-Length"):
            response["Content-Length"] = str(len(response.content))
        return response
