"""The viewer as a Starlette application: GET-only routes over a read-only
Store. Bad references answer with the same error page the bundle uses."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from cli.view.jinja_pages import Links
from cli.view.site import Site, parse_filter
from store import RunNotFound, Store, StoreError

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1", "testserver")
HEADERS = {
    # Served pages load nothing and run no script (the bundle's scripts are
    # allowed by hash in its own pages); this header and each page's meta
    # policy both apply.
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'none'; img-src data:; frame-src 'self'; "
        "form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=HEADERS)


def create_app(store: Store, *, allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS) -> Starlette:
    """The app over an opened Store. ``allowed_hosts`` guards against DNS
    rebinding: a page on another origin cannot read the store through it."""
    site = Site(store, Links(static=False))

    def runs(request: Request) -> HTMLResponse:
        _, problems = parse_filter(request.query_params)
        return html(site.runs_page(request.query_params), 400 if problems else 200)

    def run(request: Request) -> HTMLResponse:
        raw = request.query_params.get("page", "")
        page = int(raw) if raw.isdigit() else None
        return html(site.run_page(request.path_params["run_id"], request.query_params.get("q"), page,
                                  internals=request.query_params.get("view") == "internals"))

    def chain(request: Request) -> HTMLResponse:
        return html(site.chain_page(request.path_params["run_id"]))

    def batch_list(request: Request) -> HTMLResponse:
        raw = request.query_params.get("page", "")
        return html(site.batches_page(min(max(1, int(raw)), 1_000_000) if raw.isdigit() else 1))

    def batch(request: Request) -> HTMLResponse:
        return html(site.batch_page(request.path_params["batch_id"]))

    def chain_status(request: Request) -> HTMLResponse:
        return html(site.chain_status_page(request.path_params["run_id"]))

    def compare(request: Request) -> HTMLResponse:
        a, b = request.query_params.get("a"), request.query_params.get("b")
        chosen = request.query_params.getlist("run")
        if chosen and not (a or b):
            # Two runs ticked on the runs page.
            if len(set(chosen)) != 2:
                return html(site.compare_form(f"Tick two runs to compare ({len(set(chosen))} ticked)."), 400)
            return html(site.compare_page(*site.in_order(*dict.fromkeys(chosen))))
        if not a or not b:
            return html(site.compare_form())
        return html(site.compare_page(a, b))

    def not_found(request: Request, exc: Exception) -> HTMLResponse:
        message = exc.message if isinstance(exc, RunNotFound) else f"nothing at {request.url.path}"
        return html(site.error_page("Not found", message), 404)

    def store_failed(request: Request, exc: Exception) -> HTMLResponse:
        return html(site.error_page("Store error", str(exc)), 500)

    def http_error(request: Request, exc: Exception) -> HTMLResponse:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 404:
            return not_found(request, exc)
        return html(site.error_page(f"HTTP {status}", str(getattr(exc, "detail", exc))), status)

    return Starlette(
        routes=[
            Route("/", runs), Route("/run/{run_id}", run), Route("/run/{run_id}/chain", chain),
            Route("/run/{run_id}/verified", chain_status), Route("/compare", compare),
            Route("/batches", batch_list), Route("/batch/{batch_id}", batch),
        ],
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))],
        exception_handlers={RunNotFound: not_found, StoreError: store_failed, HTTPException: http_error},
    )
