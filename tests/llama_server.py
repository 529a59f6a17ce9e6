"""llama.cpp's own ``llama-server`` on a free loopback port, for the tests and
the benchmarks that need what llama-cpp-python's server does not send (token
ids on each logprob entry, ``/props``). The binary is built once by
``scripts/setup.sh`` (``escrow_setup_llama_server``); this starts a private
instance and never touches the shared server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

CACHE = Path(os.environ.get("ESCROW_CACHE", "/var/cache/escrow"))
BUILD = "11434"
BINARY = Path(os.environ.get("ESCROW_TEST_LLAMA_SERVER_BIN", CACHE / f"llama-server-b{BUILD}/bin/llama-server"))
MODEL = CACHE / "models/gemma-3-270m-q4_k_m.gguf"
CONTEXT = 2048
# The GGUF carries no chat template, and llama-server then falls back to
# ChatML (`<|im_start|>`), which Gemma echoes as text: a constrained answer
# spent its free text on `<|im_start|>user` lines until the output limit.
# Gemma's own turns (`<start_of_turn>`), read through llama-server's Jinja.
GEMMA_TEMPLATE = Path(__file__).resolve().parent / "tokens" / "templates" / "gemma.jinja"
GEMMA_CHAT = ("--jinja", "--chat-template-file", str(GEMMA_TEMPLATE))


def available() -> bool:
    return os.access(BINARY, os.X_OK) and MODEL.is_file()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def llama_server(log_path: Path, *, context: int = CONTEXT, startup_s: float = 300.0, parallel: int = 1,
                 threads: int = 2, extra: Sequence[str] = ()) -> Iterator[str]:
    """Yield the root URL (no ``/v1``) of a llama-server on the Gemma 3 270M
    GGUF (one slot unless ``parallel``; ``context`` is shared by the slots;
    ``extra`` flags go last); stop it (its whole process group) afterwards."""
    port = free_port()
    log = log_path.open("wb")
    process = subprocess.Popen(
        [str(BINARY), "--model", str(MODEL), "--host", "127.0.0.1", "--port", str(port), "--ctx-size", str(context),
         "--parallel", str(parallel), "--threads", str(threads), "--alias", "gemma-3-270m", "--no-webui", *extra],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s  # a loaded 2-core machine loads the model slowly
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama-server exited {process.returncode}: {log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server did not answer /health within {startup_s:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
