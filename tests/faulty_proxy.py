"""A fault-injecting HTTP proxy in front of a real server (the tests' S3): it forwards every request, except that
it answers the next N requests of a method with a 5xx of its own, and it can go down (its port refuses
connections, open ones are cut) and come back on the same port.

    proxy = FaultyProxy("http://127.0.0.1:5000")   # proxy.url is what clients use
    proxy.fail("PUT", 2)                           # the next two PUTs get 503 SlowDown
    proxy.stop(); ...; proxy.start()
    proxy.log                                      # [(method, path, status), ...]
"""

from __future__ import annotations

import http.client
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "expect", "transfer-encoding", "proxy-connection", "te", "upgrade"}


class FaultyProxy:
    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.log: list[tuple[str, str, int]] = []
        self.faults: dict[str, list[int]] = {}  # method -> statuses to answer with, in order
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._httpd: ThreadingHTTPServer | None = None
        self.start()

    def fail(self, method: str, times: int, status: int = 503) -> None:
        with self._lock:
            self.faults.setdefault(method, []).extend([status] * times)

    def start(self) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), type("Handler", (_Handler,), {"proxy": self}))
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True).start()

    def stop(self) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            for conn in self._open:  # keep-alive connections would otherwise go on being served
                conn.shutdown(socket.SHUT_RDWR)
            self._open.clear()

    def requests(self, method: str, path_part: str) -> list[int]:
        """Statuses answered to the requests of this method whose path contains path_part, in order."""
        return [status for m, path, status in self.log if m == method and path_part in path]


class _Handler(BaseHTTPRequestHandler):
    proxy: FaultyProxy
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        with self.proxy._lock:
            self.proxy._open.add(self.connection)

    def finish(self) -> None:
        with self.proxy._lock:
            self.proxy._open.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.proxy._lock:
            queued = self.proxy.faults.get(self.command) or []
            fault = queued.pop(0) if queued else None
        if fault is not None:
            status, headers = fault, {"Content-Type": "application/xml"}
            data = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code><Message>injected {fault}"
                    f"</Message></Error>").encode()
        else:
            upstream = http.client.HTTPConnection(*self.proxy.upstream, timeout=60)
            upstream.request(self.command, self.path, body=body,
                             headers={k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP})
            answer = upstream.getresponse()
            status, data = answer.status, answer.read()
            headers = {k: v for k, v in answer.getheaders() if k.lower() not in HOP_BY_HOP}
            upstream.close()
        with self.proxy._lock:
            self.proxy.log.append((self.command, self.path, status))
        self.send_response(status)
        for k, v in headers.items():
            if k.lower() != "content-length":
                self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", headers.get("Content-Length") or headers.get("content-length") or "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward
