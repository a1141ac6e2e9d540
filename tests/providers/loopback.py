"""A real HTTP server on 127.0.0.1 that replays a provider's recorded responses, or a fault.

respx answers inside httpx, so it cannot model what happens on the wire: a server that sends a
byte a second, one that accepts and never answers, a gzip body that does not decode, a redirect
to another port. This server can. Each `FaultServer` serves one provider's manifest
(fixtures/<name>/routes.json) by path; `fault` decides, per request, what to send instead.
Every request it receives is recorded (method, path with query, headers, body), so a test can
check that no credential ever reached a server it was not meant for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from tools.fixture_routes import FixtureRoute, Manifest


@dataclass
class Received:
    method: str
    target: str  # path and query as sent
    headers: dict[str, str]
    body: bytes

    def text(self) -> str:
        head = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        return f"{self.method} {self.target}\n{head}\n\n{self.body.decode('utf-8', 'replace')}"


# What a fault returns for one request: (status, headers, body chunks, seconds between chunks),
# or None for "answer as recorded", or HANG for "never answer".
Reply = tuple[int, dict[str, str], list[bytes], float]
HANG = "hang"
Fault = Callable[["FaultServer", Received, bytes], "Reply | str | None"]


@dataclass
class FaultServer:
    manifest: Manifest
    fault: Fault | None = None
    # Bodies to serve instead of the recorded ones, by fixture file name (e.g. an absurd price).
    bodies: dict[str, bytes] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else each small write waits ~40 ms for a delayed ACK

            def log_message(self, *args) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Received(self.command, self.path, dict(self.headers.items()), body)
                server.received.append(request)
                route = server.route(request)
                recorded = (server.bodies.get(route.fixture.name) or route.body()) if route else b""
                reply = server.fault(server, request, recorded) if server.fault else None
                if reply == HANG:
                    server._stop.wait(30)
                    self.close_connection = True
                    return
                if reply is None:
                    reply = (route.status, {"Content-Type": "application/json", **route.headers}, [recorded], 0.0) \
                        if route else (404, {"Content-Type": "text/plain"}, [b"no such route"], 0.0)
                status, headers, chunks, pause = reply
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(sum(len(c) for c in chunks)))
                self.end_headers()
                try:
                    for i, chunk in enumerate(chunks):
                        if i and pause and server._stop.wait(pause):
                            break
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            do_GET = do_POST = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True)
        self._thread.start()

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def netloc(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def route(self, request: Received) -> FixtureRoute | None:
        """The first manifest route whose method, path and query parameters match the request
        (as tools/fixture_routes.py matches them for respx); its status and headers are served too."""
        parts = urlsplit(request.target)
        query = dict(parse_qsl(parts.query))
        for route in self.manifest.routes:
            if route.method == request.method and route.path == parts.path and \
                    all(query.get(k) == v for k, v in route.params.items()):
                return route
        return None

    def close(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()


# -- faults ------------------------------------------------------------------------------------


def drip(seconds_per_byte: float = 1.0, give_up_after_s: float = 10.0) -> Fault:
    """The recorded body, one byte at a time (headers at once, Content-Length honest).

    After `give_up_after_s` the server drops the connection, so a client with no time budget
    fails a test in seconds instead of hanging it for hours.
    """
    def fault(server: FaultServer, request: Received, recorded: bytes) -> Reply:
        count = max(1, int(give_up_after_s / seconds_per_byte))
        return 200, {"Content-Type": "application/json", "Content-Length": str(len(recorded))}, \
            [recorded[i:i + 1] for i in range(min(count, len(recorded)))], seconds_per_byte
    return fault


def hang(server: FaultServer, request: Received, recorded: bytes) -> str:
    return HANG


def gzip_garbage(server: FaultServer, request: Received, recorded: bytes) -> Reply:
    return 200, {"Content-Type": "application/json", "Content-Encoding": "gzip"}, [b"\x1f\x8b not gzip at all " * 8], 0.0


def redirect_to(other: FaultServer, status: int) -> Fault:
    """Every request redirected to the same path and query on `other` (another port: another host)."""
    def fault(server: FaultServer, request: Received, recorded: bytes) -> Reply:
        return status, {"Location": other.root + request.target}, [b""], 0.0
    return fault


def redirect_loop(server: FaultServer, request: Received, recorded: bytes) -> Reply:
    return 302, {"Location": server.root + request.target}, [b""], 0.0


def wait_until(condition: Callable[[], bool], timeout: float = 2.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()
