"""HTTP/1.1 inside a process's poll loop: the server of the management API, the metrics and the health checks.

Every RoQ process runs one ``zmq.Poller`` loop; an HTTP server must live in it, not in a thread or a second
event loop beside it. The protocol is h11's, which is sans-I/O (it parses and frames, and never touches a
socket); this package owns the sockets: a listening socket and its connections, non-blocking, registered in
the process's poller by :meth:`HttpServer.sync` and served by :meth:`HttpServer.ready` with the poll's events.
What a handler takes and gives is :mod:`roq.http.messages`; one client's connection, :mod:`roq.http.connection`;
the server that takes connections and drives them, :mod:`roq.http.server`.

What a process serves is one *handler*: ``handler(request, later) -> HttpResponse | None``. It answers now,
or returns None and answers later through ``later.respond(response)`` (a request that waits for the cluster),
or returns an :class:`EventStream` that the process feeds (server-sent events; a ``HEAD`` of it is answered
its headers and never opens). The server keeps its own boundary, as :class:`roq.server.Dispatcher` does for
ZeroMQ: a malformed request gets 400 and its connection is closed, a body over ``max_body`` 413 without being
read, a body that does not decode 400 (:meth:`HttpRequest.json`), a handler that raises 500; each is counted
in the process's drop counter and the loop goes on.

Slow and greedy clients cannot hold it (see docs/http.md, "Bounded"):

* a request's head must be whole ``head_timeout`` after its first byte (or after the answer before it, for a
  pipelined one), and its body must keep up ``min_body_rate``; bytes trickling in do not extend either: 408,
  and the connection is closed;
* connections are bounded in all (``max_connections``) and per client address (``max_per_address``); one over
  either goes to a small *reserve* (``reserve``) where only the health checks (``health_paths``) are answered
  (anything else 503), its head due within ``reserve_timeout``; a newcomer to a full reserve evicts the oldest
  of those that have sent part of a request (a health check sends its head at once), else the oldest;
* pipelined requests are answered one after another by a loop, in order, and their answers written at once;
  a turn of the loop reads :data:`READ_BYTES` of a connection, so that its requests take turns with everyone
  else's; a connection's input is not read further while its answers wait to be written
  (:data:`PAUSE_OUTPUT`) or, while a request waits for its answer, once :data:`PIPELINE_BYTES` more came;
* a client that closed its side (end of file) is answered, and its socket is no longer polled for input;
* a connection idle for ``idle_timeout`` is closed; a client that stops reading is cut off once
  ``max_output`` bytes wait for it.
"""

from roq.http.messages import STATUS_TEXT, EventStream, Handler, HttpRequest, HttpResponse, Later
from roq.http.server import HEALTH_PATHS, MAX_PER_ADDRESS, HttpServer

__all__ = ["HttpRequest", "HttpResponse", "EventStream", "Later", "HttpServer", "Handler", "STATUS_TEXT",
           "HEALTH_PATHS", "MAX_PER_ADDRESS"]
