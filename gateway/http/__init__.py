"""The HTTP/1.1 server: one connection handler on h11's public API behind hypercorn
(:mod:`~gateway.http.connection`, :mod:`~gateway.http.exchange`, :mod:`~gateway.http.h1`),
the one seam into hypercorn (:mod:`~gateway.http.seam`), serving, signals and drain
(:mod:`~gateway.http.serve`), and the quart glue both services share
(:mod:`~gateway.http.asgi`, :mod:`~gateway.http.replies`, :mod:`~gateway.http.direct`).
Imports nothing above it (routes, the app, the proxy)."""
