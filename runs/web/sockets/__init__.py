"""What the pages' websocket (runs.web.consumers) needs besides the consumer itself: who may
listen (`access`), the reads of the durable log, batched across the process's sockets
(`reads`, `scheduler`), and the frames rendered once per process (`render_cache`)."""
