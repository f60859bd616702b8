"""Frames rendered once per process and shared by every socket that receives them: an event
has at most two renderings (with its resume token, and without)."""

from collections import OrderedDict

from runs.identity.visibility import Viewer
from runs.streams import reads as streams
from runs.web.frames import frame_text

_RENDERED: OrderedDict[tuple[str, int, str, str, bool], str] = OrderedDict()
_RENDERED_MAX = 2048


def render_pushed(
    item: dict, *, viewer: Viewer, tenant_slug: str, run_id: str | None, types: frozenset[str] | None = None
) -> str | None:
    """The frame of one pushed event as this viewer receives it, or None when it does not
    (streams.push_shown: no database read)."""
    with_token = streams.push_shown(item, viewer=viewer, run_id=run_id, types=types)
    if with_token is None:
        return None
    envelope = item["envelope"]
    key = (tenant_slug, envelope["sequence"], envelope["run"], envelope["occurred_at"], with_token)
    text = _RENDERED.get(key)
    if text is None:
        text = frame_text(streams.pushed_envelope(item, tenant_slug=tenant_slug, with_token=with_token))
        _RENDERED[key] = text
        if len(_RENDERED) > _RENDERED_MAX:
            _RENDERED.popitem(last=False)
    return text
