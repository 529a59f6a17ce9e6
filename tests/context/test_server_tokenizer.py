"""The server-tokenizer client against real HTTP servers on loopback.

No vLLM runs here, so a small loopback server speaks vLLM's /tokenize and
/v1/models dialect (documented shapes) and a broken one answers 500; the
llama.cpp dialect is tested against the real server in test_llama_context.py.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from orchestrator.adapters.model_client.server_tokenizer import (
    counter_for,
    discover_context_window,
    probe_server_tokenizer,
    server_root,
)
from orchestrator.context import TiktokenCounter
from orchestrator.errors import TokenizerError


class VllmDialect(BaseHTTPRequestHandler):
    broken = False

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "qwen", "max_model_len": 32768}]})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.broken:
            self._send(500, {"error": "engine down"})
        elif self.path == "/tokenize" and body.get("add_special_tokens") is False:
            tokens = list(range(len(body["prompt"].split())))
            self._send(200, {"tokens": tokens, "count": len(tokens), "max_model_len": 32768})
        else:
            self._send(404, {"detail": "Not Found"})


class BrokenDialect(VllmDialect):
    broken = True


def serve(handler) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


@pytest.fixture
def http():
    with httpx.Client(timeout=5.0) as client:
        yield client


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_server_root():
    assert server_root("http://h:1/v1/") == "http://h:1" and server_root("http://h:1") == "http://h:1"


def test_vllm_dialect(http):
    server, url = serve(VllmDialect)
    try:
        tok = probe_server_tokenizer(url, model="qwen", http=http)
        assert tok.dialect == "vllm" and tok.name == "server:vllm:qwen"
        assert tok.count("one two three") == 3 and tok.count("") == 0
        assert discover_context_window(url, model="qwen", http=http) == 32768
        assert discover_context_window(url, model="other", http=http) is None
    finally:
        server.shutdown()


def test_a_failing_tokenizer_is_a_clear_error(http):
    server, url = serve(BrokenDialect)
    try:
        with pytest.raises(TokenizerError, match="no tokenizer endpoint.*HTTP 500"):
            probe_server_tokenizer(url, model="qwen", http=http)
    finally:
        server.shutdown()


def test_unreachable_server(http):
    url = closed_port_url()
    with pytest.raises(TokenizerError, match="unreachable"):
        probe_server_tokenizer(url, model="m", http=http)
    assert discover_context_window(url, model="m", http=http) is None
    with pytest.raises(TokenizerError):
        counter_for("server", base_url=url, model="m", http=http)
    assert isinstance(counter_for("auto", base_url=url, model="m", http=http), TiktokenCounter)
    with pytest.raises(TokenizerError, match="needs a model server"):
        counter_for("server", base_url=None, model="m", http=None)
    with pytest.raises(TokenizerError, match="unknown tokenizer"):
        counter_for("sentencepiece", base_url=url, model="m", http=http)
