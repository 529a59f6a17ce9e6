"""``escrow view``: browse the store in a web browser, read-only, or write
the same pages as a static bundle (``--export``)."""

from __future__ import annotations

import socket
from pathlib import Path

import typer
from rich.console import Console

from cli.store_cmd import open_store
from cli.store_options import CONFIG_HELP, DB_HELP
from orchestrator.errors import ConfigError
from store import Store


def view(
    runs: list[str] = typer.Argument(
        None, metavar="RUN", help="With --export: the runs to bundle (ids or prefixes); default all."
    ),
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="Port to serve on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to serve on; loopback unless you mean to share."),
    export: Path | None = typer.Option(
        None, "--export", help="Write a static bundle to this folder instead of serving."
    ),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Browse recorded runs in a web browser: runs, each run turn by turn,
    and two runs compared. The store is opened read-only."""
    err = Console(stderr=True, highlight=False)
    if runs and export is None:
        raise ConfigError("run ids are only taken with --export DIR; the server shows every run")
    store = open_store(db, config)
    with store:
        if export is not None:
            from cli.display.progress import StepProgress
            from cli.view.static_bundle import export_bundle

            shown = StepProgress("pages written")
            try:
                written = export_bundle(store, export, runs or [], progress=shown.step)
            finally:
                shown.done()
            err.print(f"wrote {len(written)} pages to {export}; open {export / 'index.html'}")
            return
        serve(store, host, port, err)


def check_free(host: str, port: int) -> None:
    """A clear error for a port in use, before the server starts."""
    try:
        socket.create_server((host, port)).close()
    except OSError as exc:
        raise ConfigError(f"cannot serve on {host}:{port}: {exc.strerror or exc}; choose another --port",
                          host=host, port=port) from None


def serve(store: Store, host: str, port: int, err: Console) -> None:
    import uvicorn

    from cli.view.app import LOOPBACK_HOSTS, create_app

    check_free(host, port)
    hosts = LOOPBACK_HOSTS if host in ("127.0.0.1", "localhost", "::1") else ("*",)
    config = uvicorn.Config(create_app(store, allowed_hosts=hosts), host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    err.print(f"escrow view: serving {store.url} read-only at http://{host}:{port}/ (Ctrl-C stops)")
    server.run()


def register(app: typer.Typer) -> None:
    app.command("view")(view)
