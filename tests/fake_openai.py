"""A fake OpenAI-compatible server over real HTTP: scripted chat completions, errors, delays and drops.

    with FakeOpenAI([Scripted(status=429, headers={"Retry-After": "1"}), Scripted(content="hi")]) as server:
        settings = LLMSettings(model="m", base_url=server.base_url)

Replies are consumed in order, one per POST /v1/chat/completions; past the script the server answers 500.
It is plain HTTP on 127.0.0.1, so a client in another process can use it too.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-model"


@dataclass
class Scripted:
    """One reply of the fake server."""

    content: str = "ok"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # sleep before answering (to exceed a client's timeout)
    drop: bool = False  # close the connection without any response
    finish_reason: str = "stop"
    usage: tuple[int, int] | None = (10, 5)  # (prompt_tokens, completion_tokens); None: no usage field
    error_message: str = "scripted error"  # the error body's message when status != 200


class FakeOpenAI:
    """The server: `base_url`, `requests` (JSON bodies received) and `keys_seen` (bearer keys received)."""

    def __init__(self, script: list[Scripted]):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.keys_seen: list[str] = []
        self.base_url = ""
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    def __enter__(self) -> FakeOpenAI:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()

    def next_reply(self, body: dict[str, Any], key: str) -> Scripted:
        with self._lock:
            self.requests.append(body)
            self.keys_seen.append(key)
            if self.script:
                return self.script.pop(0)
            return Scripted(status=500, error_message=f"FakeOpenAI: script exhausted after {len(self.requests) - 1} "
                                                      "replies")


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            return self._send(404, _error("not found", "invalid_request_error"))
        self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                      "owned_by": "fake"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        auth = self.headers.get("Authorization", "")
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._send(404, _error("not found", "invalid_request_error"))
        if not auth.startswith("Bearer ") or not auth.removeprefix("Bearer ").strip():
            return self._send(401, _error("missing bearer key", "invalid_request_error"))
        reply = self.fake.next_reply(body, auth.removeprefix("Bearer ").strip())
        time.sleep(reply.delay_s)
        if reply.drop:
            self.close_connection = True
            return
        if reply.status != 200:
            return self._send(reply.status, _error(reply.error_message, "scripted_error"), reply.headers)
        completion: dict[str, Any] = {
            "id": f"chatcmpl-fake{len(self.fake.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", MODEL),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.content},
                         "finish_reason": reply.finish_reason}],
        }
        if reply.usage is not None:
            tokens_in, tokens_out = reply.usage
            completion["usage"] = {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                                   "total_tokens": tokens_in + tokens_out}
        self._send(200, completion, reply.headers)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timed out) first
            self.close_connection = True


def _error(message: str, type_: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": None}}
