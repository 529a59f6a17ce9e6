"""``escrow sandbox build|doctor|gc``: the local sandbox image and its hardening."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import typer

from cli.usage import choices
from orchestrator.exit_codes import ExitCode
from orchestrator.settings import RUNTIME_CHOICES, load_settings

sandbox_app = typer.Typer(
    help="Build, check and clean up the hardened Docker sandbox.", no_args_is_help=True, rich_markup_mode=None
)

_IMAGE = typer.Option(None, "--image", help="Image tag (default: settings sandbox_image).")
_HOST = typer.Option(None, "--docker-host", help="Docker daemon URL (default: DOCKER_HOST or the local socket).")
_JSON = typer.Option(False, "--json", help="Print machine-readable JSON.")


def _client_and_tag(image: str | None, docker_host: str | None):
    from sandbox.daemon import connect

    settings = load_settings(sandbox_image=image, docker_host=docker_host)
    return connect(settings.docker_host), settings.sandbox_image


@sandbox_app.command("build")
def build(
    image: str | None = _IMAGE,
    docker_host: str | None = _HOST,
    force: bool = typer.Option(False, "--force", help="Rebuild even if the image (and cached rootfs) exist."),
    cache_dir: Path = typer.Option(
        Path("/var/cache/escrow/sandbox"), "--cache-dir", help="Where .debs and the rootfs tarball are cached."
    ),
    as_json: bool = _JSON,
) -> None:
    """Build the sandbox image from a debootstrap rootfs (reused when the tag exists)."""
    from sandbox.image import build_image

    client, tag = _client_and_tag(image, docker_host)
    echo = (lambda line: None) if as_json else (lambda line: typer.echo(line, err=True))
    result = build_image(client, tag, force=force, cache_dir=cache_dir, progress=echo)
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json"), sort_keys=True))
    else:
        verb = "reused" if result.reused_image else "built"
        typer.echo(
            f"{verb} {result.tag} ({result.image_id[:19]}) from {result.mirror} {result.suite} in {result.seconds}s"
        )


@sandbox_app.command("doctor")
def doctor(image: str | None = _IMAGE, docker_host: str | None = _HOST,
           runtime: str = typer.Option(None, "--runtime", metavar=choices(RUNTIME_CHOICES),
                                       help="The runtime to check: runc, runsc (gVisor) or auto "
                                       "(default: the one a run gets)."),
           as_json: bool = _JSON) -> None:
    """Check the daemon, the image, the runtime (from inside: gVisor's kernel
    under runsc), and that every hardening option is in effect."""
    from sandbox.doctor import run_doctor
    from sandbox.runtime import choose_runtime

    settings = load_settings(sandbox_image=image, docker_host=docker_host, sandbox_runtime=runtime)
    client, tag = _client_and_tag(image, docker_host)
    report = run_doctor(client, tag, choose_runtime(client, settings.sandbox_runtime))
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), sort_keys=True))
    else:
        from cli.display.table import terminal_width

        width = terminal_width()
        for check in report.checks:
            mark = "ok  " if check.ok else "FAIL"
            typer.echo(_wrapped(f"{mark} {check.name}: {check.detail}", width))
    if not report.ok:
        image_missing = any(c.name == "image" and not c.ok for c in report.checks)
        raise typer.Exit(ExitCode.IMAGE_MISSING if image_missing else ExitCode.FINDING)


def _wrapped(line: str, width: int) -> str:
    """A long check wraps under its name at word breaks; an escrow command
    in it (a hint to copy) stays on one line."""
    kept = _COMMAND.sub(lambda m: m.group(0).replace(" ", "\xa0"), line)
    return textwrap.fill(kept, width=width, subsequent_indent=" " * 5, break_long_words=True,
                         break_on_hyphens=False).replace("\xa0", " ")


_COMMAND = re.compile(r"escrow (sandbox|run|batch|show|report|runs|view)\b[^;,()]*")


@sandbox_app.command("gc")
def gc(
    docker_host: str | None = _HOST,
    all_: bool = typer.Option(
        False, "--all", help="Also remove containers and state directories whose owner is still alive."
    ),
    as_json: bool = _JSON,
) -> None:
    """Remove sandbox containers and /tmp/escrow-* state directories left
    behind by crashed runs (found by their owner labels)."""
    from sandbox.orphans import remove_dead_state_dirs, remove_orphans

    client, _ = _client_and_tag(None, docker_host)
    removed = remove_orphans(client, include_live=all_)
    dirs = remove_dead_state_dirs(include_live=all_)
    if as_json:
        typer.echo(json.dumps({"removed": removed, "removed_state_dirs": dirs}))
    else:
        typer.echo(f"removed {len(removed)} container(s)" + (": " + ", ".join(removed) if removed else ""))
        typer.echo(f"removed {len(dirs)} state director{'y' if len(dirs) == 1 else 'ies'}"
                   + (": " + ", ".join(dirs) if dirs else ""))


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
