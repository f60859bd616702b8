"""The demo calendar source as the OAuth tests configure it (its provider address unused
unless a test replaces it)."""

from approvals.oauth.sources import Source

SOURCE = Source(
    name="calendar",
    display_name="Demo Calendar",
    client_id="harbor-demo",
    client_secret="s3cret-client-secret",
    authorize_url="http://127.0.0.1:9/o/authorize/",
    token_url="http://127.0.0.1:9/o/token/",
    scopes=("calendar.read",),
)
