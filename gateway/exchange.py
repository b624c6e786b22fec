"""One request served on the lean path: no h11, no hypercorn stream, the same app.

hypercorn serves a request through h11 (parse, then frame every response event),
its ``HTTPStream`` (ASGI state machine, access hook), its task group (a memory
channel, a task) and its recycle bookkeeping: about a quarter of a streamed chat
request's CPU on the benchmark (docs/benchmarks.md, "Round 7"). For the heads that
:func:`gateway.h1lean.parse_head` accepts (plain requests for the lean routes, whole in
one read) the connection (:class:`gateway.connections.GatewayTCPServer`) runs a
:class:`LeanExchange` instead, and h11 never sees the request: its state stays
``IDLE`` and the next head may take either way.

What a client sees is what hypercorn's way gives (the e2e and hostile-HTTP tests run
both ways): the app is called with the same scope; the body arrives as ``http.request``
messages (bounded queue); a client that leaves is ``http.disconnect`` and the request's
:class:`Disconnect`; the answer is framed as h11 frames it (``Transfer-Encoding:
chunked`` without a length, ``Connection: close`` when the connection ends after it);
an app that ends without an answer gets hypercorn's 500 as the gateway's JSON (503
``gateway_draining`` while the server stops); an answer cut short closes the connection.
After the answer the connection is recycled, or closed when the client asked, the
server stops, ``keep_alive_max_requests`` is reached, or a body still owed is larger
than :data:`DISCARD_LIMIT` (a smaller one is read and dropped first).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable
from typing import Any

import trio

from gateway.h1lean import LAST_CHUNK, LeanHead, chunk, response_head
from gateway.handoff import Handoff

__all__ = [
    "BODY_KEY",
    "DISCARD_LIMIT",
    "DISCONNECT_KEY",
    "RELEASE_KEY",
    "WRITES_KEY",
    "Disconnect",
    "LeanExchange",
    "error_answer",
    "error_body",
    "unanswered",
]

log = logging.getLogger("gateway.connections")

#: the scope key of the connection whose writes an app may join (GatewayTCPServer.cork)
WRITES_KEY = "gateway.writes"
#: the scope key of the request's :class:`Disconnect`
DISCONNECT_KEY = "gateway.disconnect"
#: the scope key of the request's whole body when it came with the head (the lean path):
#: a handler takes it as it is, without waiting on ``receive`` (the same bytes are
#: queued as the ``http.request`` message for anyone who asks)
BODY_KEY = "gateway.body"
#: the scope key of a callable that lets the body's bytes go (the handler is done with
#: them: the queued ``http.request`` message keeps an empty body from then on)
RELEASE_KEY = "gateway.release_body"
#: a refused request whose declared body is at most this is read and dropped (keep-alive)
DISCARD_LIMIT = 64 * 1024

_ASGI = {"spec_version": "2.1", "version": "3.0"}
_REQUEST, _RESPONSE, _DONE = 0, 1, 2
_DISCONNECT = {"type": "http.disconnect"}


class Disconnect:
    """The moment the client of one request is gone, as a callback: an app that needs
    to stop when that happens registers one (``scope[DISCONNECT_KEY].on(cancel)``)
    instead of keeping a task blocked on ``receive()`` for the ``http.disconnect``."""

    __slots__ = ("_callback", "happened")

    def __init__(self) -> None:
        self.happened = False
        self._callback: Callable[[], object] | None = None

    def on(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback`` when the client leaves (at once if it has); None: forget it."""
        self._callback = callback
        if callback is not None and self.happened:
            self.set()

    def set(self) -> None:
        self.happened = True
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()


def error_body(code: str, message: str) -> bytes:
    """The gateway's JSON error body."""
    return json.dumps({"error": {"message": message, "type": code, "code": code}}).encode()


def error_answer(code: str, message: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The fields and body of a JSON error answer after which the connection closes."""
    body = error_body(code, message)
    fields = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
    ]
    return fields, body


def unanswered(stopping: bool) -> tuple[int, str, str]:
    """The answer to a request the app ended without answering, as hypercorn's way gives
    it: 500, or 503 ``gateway_draining`` while the server stops."""
    if stopping:
        return (
            503,
            "gateway_draining",
            "The server is restarting and did not serve this request; please retry.",
        )
    return 500, "internal_error", "The server failed to answer this request; it was logged."


class LeanExchange:
    """One request and its answer on a :class:`~gateway.connections.GatewayTCPServer`.

    The connection's reader calls :meth:`feed` with what arrives (the body, then
    nothing more until :attr:`finished`), :meth:`client_left` and :meth:`abandon`; the
    app task runs :meth:`run`. ``server`` provides ``write(bytes)``,
    ``recycle(exchange)``, ``close_exchange(exchange)``, ``config``, ``context`` and the
    connection's ``protocol`` (client, server, state, ``closing``).
    """

    def __init__(self, server: Any, head: LeanHead, first: bytes) -> None:
        self.server = server
        proto = server.protocol
        config = server.config
        self.length = self.body_left = head.length
        self.keep_alive = head.keep_alive
        proto.keep_alive_requests += 1
        #: hypercorn's keep_alive_max_requests reached: this answer is the last
        self.last = proto.keep_alive_requests >= config.keep_alive_max_requests
        self.close_after = self.last or not head.keep_alive
        self.queue: Handoff[Any] = Handoff(config.max_app_queue_size)
        self.gone = Disconnect()
        self.state = _REQUEST
        self.chunked = False
        self.lost = False  # the client left, or the connection layer answered instead
        #: answered and recycled (or closing): the reader reads on (:meth:`wait_finished`)
        self.finished = False
        self._finished_event: trio.Event | None = None  # made only when someone waits
        self._app_done = False
        path = head.path
        self.scope: dict[str, Any] = {
            "type": "http",
            "http_version": "1.1",
            "asgi": _ASGI,
            "method": head.method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode("ascii"),
            "query_string": b"",
            "root_path": config.root_path,
            "headers": head.headers,
            "client": proto.client,
            "server": proto.server,
            "state": proto.connection_state.copy(),
            "extensions": {},
            DISCONNECT_KEY: self.gone,
            WRITES_KEY: server,
        }
        # ``first``: the body's bytes that came with the head (the queue is empty: no wait)
        self.body_left -= len(first)
        if not self.body_left:
            self.scope[BODY_KEY] = first
        if first or not self.body_left:
            more = self.body_left > 0
            message = {"type": "http.request", "body": first, "more_body": more}
            self.queue.send_nowait(message)
            self.scope[RELEASE_KEY] = functools.partial(message.__setitem__, "body", b"")

    # -- the reader's side

    @property
    def receiving(self) -> bool:
        """Is part of the declared body still to come?"""
        return self.body_left > 0

    async def feed(self, data: bytes) -> bytes:
        """Take the body's bytes from ``data``; what follows the body is returned (the
        client's next request: it waits for :attr:`finished`)."""
        left = self.body_left
        if not left:
            return data
        part, rest = (data, b"") if len(data) <= left else (data[:left], data[left:])
        self.body_left = left = left - len(part)
        if self._app_done:  # answered already: the rest of a small body is dropped
            if not left:
                await self._recycle()
            return rest
        message = {"type": "http.request", "body": part, "more_body": left > 0}
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self.queue.send(message)  # dropped when the app no longer reads
        return rest

    @property
    def started(self) -> bool:
        """Has the answer begun?"""
        return self.state != _REQUEST

    def client_left(self) -> None:
        """The client is gone, or has half-closed its side (EOF, a failed write, a read
        timeout answered): the app is told; writes go on until one fails (``lost``)."""
        if self.gone.happened:
            return
        self.gone.set()
        self.queue.send_past_limit(_DISCONNECT)  # never waits

    def abandon(self) -> None:
        """Nobody will read an answer (a failed write, or the connection layer answered
        instead): the app is told, and what it still sends goes nowhere."""
        self.lost = True
        self.client_left()

    def _set_finished(self) -> None:
        self.finished = True
        if self._finished_event is not None:
            self._finished_event.set()

    async def wait_finished(self) -> None:
        """Until the exchange is :attr:`finished` (a checkpoint, as ``Event.wait``). The
        event is made by the first wait: most requests end with none (an open stream
        held one, with its set of waiters, for nothing)."""
        if self.finished:
            await trio.lowlevel.checkpoint()
            return
        if self._finished_event is None:
            self._finished_event = trio.Event()
        await self._finished_event.wait()

    # -- the app's side

    async def run(self, app: Any, direct: Any = None) -> None:
        """Call the ASGI ``app`` (hypercorn's wrapper), then finish the exchange (the
        error answer if it gave none, the recycle or the close). ``direct``: the quart
        app inside it, called at its ``asgi_http_class`` (what its ``asgi_app`` does
        for an HTTP scope; the caller knows it has no middleware), or None."""
        try:
            if direct is not None:
                await direct.asgi_http_class(direct, self.scope)(self.queue.receive, self.send)
            else:
                await app(
                    self.scope,
                    self.queue.receive,
                    self.send,
                    trio.to_thread.run_sync,
                    trio.from_thread.run,
                )
        except trio.Cancelled:
            raise
        except BaseExceptionGroup as group:  # as hypercorn's task group: log, not raise
            if group.split(trio.Cancelled)[1] is None:
                raise
            log.error("unhandled error in the app", exc_info=group)
        except Exception:
            log.exception("unhandled error in the app")
        finally:
            if not self._ended_now():
                with trio.CancelScope(shield=True):
                    await self._finish()

    async def send(self, message: Any) -> None:
        """The app's ASGI ``send``: frame the answer (h11's framing) and write it."""
        if self.lost or self.server.protocol.closing:
            return  # nobody to answer, or the connection layer answered already
        kind = message["type"]
        if kind == "http.response.start" and self.state == _REQUEST:
            # the fields in the places and spellings hypercorn and h11 give them
            headers = list(message.get("headers", ()))
            if self.body_left and self.length > DISCARD_LIMIT:
                self.close_after = True  # too much owed to read and drop: close after
                headers.append((b"connection", b"close"))
            headers += self.server.config.response_headers("h11")
            if self.last:
                headers.append((b"connection", b"close"))
            head, self.chunked = response_head(
                int(message["status"]), headers, close=not self.keep_alive
            )
            self.state = _RESPONSE
            await self.server.write(head)
        elif kind == "http.response.body" and self.state == _RESPONSE:
            body = message.get("body", b"")
            more = message.get("more_body", False)
            if not more:
                self.state = _DONE
            if self.chunked:
                data = chunk(body) if body else b""
                if not more:
                    data += LAST_CHUNK
            else:
                data = body
            if data:
                await self.server.write(data)
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} in state {self.state}")

    def _ended_now(self) -> bool:
        """The common ends, with nothing to wait for: a whole answer, nothing owed, and
        the connection either kept (recycled) or closing after it (the client asked, or
        the server stops) with no write under way (FIN, then linger). Done here without
        a shielded scope (False: neither, and nothing done)."""
        if self.state != _DONE or self.lost or self.gone.happened or self.body_left:
            return False
        if self.close_after or self.server.context.terminated.is_set():
            if not self.server.close_exchange_nowait(self):
                return False
            self.close_after = True
        else:
            self.server.recycle(self)
        self.queue.close_receive()
        self._app_done = True
        self._set_finished()
        return True

    async def _finish(self) -> None:
        self.queue.close_receive()
        self._app_done = True
        if self.state == _REQUEST and not self.gone.happened and not self.server.protocol.closing:
            await self._answer_error(*unanswered(self.server.context.terminated.is_set()))
        if self.state != _DONE or self.lost or self.gone.happened:
            await self._close()  # an answer cut short, or nobody left to answer
        elif not self.body_left or self.close_after:
            await self._recycle()  # (which closes when the connection must)
        # else: the rest of a small body is read and dropped, then recycled (feed)

    async def _answer_error(self, status: int, code: str, message: str) -> None:
        self.close_after = True
        fields, body = error_answer(code, message)
        await self.send({"type": "http.response.start", "status": status, "headers": fields})
        await self.send({"type": "http.response.body", "body": body, "more_body": False})

    async def _recycle(self) -> None:
        if self.close_after or self.server.context.terminated.is_set():
            await self._close()
            return
        self.server.recycle(self)
        self._set_finished()

    async def _close(self) -> None:
        self.close_after = True
        self._set_finished()
        await self.server.close_exchange(self)
