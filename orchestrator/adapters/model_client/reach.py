"""The model URL checked before anything is started for it: an http(s) URL
whose host accepts a connection. A down server or a URL without its scheme
then costs one line and exit 2, not a sandbox and a recorded
TRANSPORT_FAILURE run."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx

from orchestrator.contract import Frozen
from orchestrator.errors import ConfigError, ModelUnreachable

CONNECT_TIMEOUT_S = 5.0


class ModelUrl(Frozen):
    """The model URL, parsed and checked once per run: the command that
    reached the server passes its ``ModelUrl`` down to ``run_agent``; else
    ``compose.wire`` parses it."""

    url: str
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> ModelUrl:
        """``ModelUnreachable`` unless ``url`` is an http(s) URL with a host."""
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:  # a port that is not a number, or out of range
            port = -1
        if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
            raise ModelUnreachable(
                f"the model URL {url!r} is not an http:// or https:// URL with a host (e.g. http://127.0.0.1:8088/v1)",
                url=url,
            )
        return cls(url=url, host=parts.hostname, port=port or (443 if parts.scheme == "https" else 80))


def require_reachable(url: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> ModelUrl:
    """``ModelUrl.parse``, then a TCP connection to its host and port.
    Checked by the commands before they start anything (``escrow run``,
    ``escrow batch``), not by each run of a batch: a replica that goes away
    mid-batch is a recorded TRANSPORT_FAILURE, and its task moves on. A
    ``{task_id}`` placeholder in the host is left to each run."""
    checked = ModelUrl.parse(url)
    if "{" in checked.host:
        return checked
    try:
        socket.create_connection((checked.host, checked.port), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ModelUnreachable(f"no model server answers at {url} ({reason}); start it, or give --model-url",
                               url=url) from None
    return checked


def require_model(url: str, given: str | None, *, timeout_s: float = CONNECT_TIMEOUT_S) -> str:
    """The model id to send: ``given`` (``--model``), else the one model the
    server lists at ``/v1/models``. No default name: a run recorded under a
    model the server does not serve would price and report as that model.
    A server listing several (or none, or not answering) asks for ``--model``."""
    if given:
        return given
    served = served_models(url, timeout_s=timeout_s)
    if served is not None and len(served) == 1:
        return served[0]
    why = ("gave no listing at GET /models" if served is None else "lists no model at /models" if not served
           else f"serves {len(served)} models ({', '.join(served[:5])}{', ...' if len(served) > 5 else ''})")
    raise ConfigError(f"no --model given, and the server at {url} {why}; give --model NAME", url=url)


def served_models(url: str, *, timeout_s: float) -> tuple[str, ...] | None:
    """The ids of ``GET {url}/models`` (OpenAI's listing); None when the
    server does not answer it with a listing."""
    try:
        response = httpx.get(url.rstrip("/") + "/models", timeout=timeout_s)
        data = response.json().get("data") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    return tuple(str(entry["id"]) for entry in data if isinstance(entry, dict) and entry.get("id"))
