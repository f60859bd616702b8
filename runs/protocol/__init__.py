"""The Harbor Protocol over HTTP (PROTOCOL §2-§4, §7): thin DRF views that parse, call one
service or selector, and serialise. `errors` (one handler), `pipeline` (the base view),
`throttle`, `views` (the routes), `schema` (the OpenAPI hooks).

Every request goes through the same pipeline, in this order, failing closed:

1. size: a body over MAX_REQUEST_BYTES is `413 request_too_large`, before it is parsed
   (runs.protocol.middleware refuses it earlier still: before it is read, and before authentication);
2. parse: the body must be a JSON object (`400 invalid_request`);
3. bounds: every top-level value within PROTOCOL §3's payload bounds (`422 payload_invalid`);
4. identity: a verified bearer JWT (runs.protocol.auth), and a body identity that does not
   contradict it (`401 auth_rejected` / `401 identity_required`);
5. throttle: decisions are refused with `429 rate_limited` after repeated refusals;
6. shape: strict request validation (`400 invalid_request`; a payload that breaks its
   method's rules is `422 payload_invalid`), then the one service call.

One exception handler turns every failure into `{"code", "message"}` with its status;
nothing under /v1/ answers with HTML or a bare 500.
"""
