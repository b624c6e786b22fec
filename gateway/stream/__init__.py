"""The stream engine: the one relay (:mod:`~gateway.stream.relay`) and the run's one
timer (:mod:`~gateway.stream.clock`). Imports nothing of the HTTP server."""
