"""A demo OAuth 2.0 authorization server (django-oauth-toolkit), run in its own process as a
real provider would be: authorization code with PKCE S256, login and consent pages, refresh
tokens, and a protected calendar API. Its own settings, users and SQLite database; the app
only ever talks to it over HTTP.

    python -m approvals.oauth.provider migrate
    python -m approvals.oauth.provider provider_setup --redirect-uri http://127.0.0.1:8000/v1/tools/oauth/callback
    python -m approvals.oauth.provider serve --port 8001
"""
