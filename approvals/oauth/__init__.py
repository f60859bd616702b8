"""Tool-side OAuth (PROTOCOL §4, §6): sources, encrypted credentials, sign-in flows, the
callback, and the helper a tool calls for a token. The demo authorization server in
`provider/` is a separate Django project run in its own process, never installed here."""
