"""Build the sandbox image locally: debootstrap a Debian minbase rootfs from
the configured apt mirror, add the unprivileged user and the statx shim
(``statx_compat.c``, compiled with the host's C compiler: gVisor's runsc
needs it), ``docker import`` it.

The image is reused when its tag exists; the finished rootfs tarball and the
downloaded .debs are cached so a rebuild (``--force`` or a fresh daemon) does
not download again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import docker
import docker.errors

from orchestrator.contract import Frozen
from sandbox.errors import ImageBuildError
from sandbox.mirror import AptSource, configured_sources, primary_source

PACKAGES = ("bash", "coreutils", "python3", "python3-pytest", "git", "patch", "grep", "sed", "procps")
RECIPE_VERSION = "3"
SANDBOX_UID = 1000
SANDBOX_USER_NAME = "agent"
DEFAULT_CACHE = Path("/var/cache/escrow/sandbox")
SHIM_SOURCE = resources.files("sandbox").joinpath("statx_compat.c").read_text(encoding="utf-8")
SHIM_PATH = "usr/lib/escrow/statx_compat.so"
# The trusted pytest reporter (orchestrator/evidence.py reads what it writes),
# importable from the read-only root as ``escrow_evidence``.
REPORTER_SOURCE = resources.files("sandbox").joinpath("evidence_plugin.py").read_text(encoding="utf-8")
REPORTER_PATH = "usr/lib/python3/dist-packages/escrow_evidence.py"

Progress = Callable[[str], None]


class BuildResult(Frozen):
    tag: str
    image_id: str
    reused_image: bool
    reused_rootfs: bool
    mirror: str
    suite: str
    seconds: float


def recipe_digest(source: AptSource) -> str:
    """Identifies what a rootfs tarball was built from (mirror, suite, packages, user)."""
    text = "|".join(
        [RECIPE_VERSION, source.uri, source.suite, ",".join(PACKAGES), f"{SANDBOX_USER_NAME}:{SANDBOX_UID}",
         hashlib.sha256(SHIM_SOURCE.encode()).hexdigest(), hashlib.sha256(REPORTER_SOURCE.encode()).hexdigest()]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_image(
    client: docker.DockerClient,
    tag: str,
    *,
    force: bool = False,
    cache_dir: Path = DEFAULT_CACHE,
    etc_apt: Path = Path("/etc/apt"),
    progress: Progress = lambda line: None,
) -> BuildResult:
    started = time.monotonic()
    source = primary_source(configured_sources(etc_apt))
    progress(f"mirror {source.uri} suite {source.suite} (from apt sources)")
    if not force:
        try:
            image = client.images.get(tag)
        except docker.errors.ImageNotFound:
            image = None
        if image is not None and image.id is not None:  # the SDK types the id optional
            progress(f"image {tag} already present ({image.short_id}); reusing it")
            return _result(tag, image.id, True, True, source, started)
    digest = recipe_digest(source)
    tarball = cache_dir / f"rootfs-{source.suite}-{digest}.tar"
    reused_rootfs = tarball.is_file() and not force
    if reused_rootfs:
        progress(f"reusing cached rootfs {tarball}")
    else:
        _make_rootfs_tarball(source, tarball, cache_dir, progress)
    progress(f"docker import {tarball.name} as {tag}")
    image_id = _import(client, tarball, tag, source, digest)
    return _result(tag, image_id, False, reused_rootfs, source, started)


def _result(
    tag: str, image_id: str, reused: bool, reused_rootfs: bool, source: AptSource, started: float
) -> BuildResult:
    return BuildResult(
        tag=tag, image_id=image_id, reused_image=reused, reused_rootfs=reused_rootfs,
        mirror=source.uri, suite=source.suite, seconds=round(time.monotonic() - started, 1),
    )


def _make_rootfs_tarball(source: AptSource, tarball: Path, cache_dir: Path, progress: Progress) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError("building the sandbox image runs debootstrap, which needs root: rerun as root (sudo)")
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed: apt-get install debootstrap")
    if shutil.which("cc") is None:
        raise ImageBuildError("the sandbox image's statx shim needs a C compiler: apt-get install gcc libc6-dev")
    debs = cache_dir / f"debs-{source.suite}"
    debs.mkdir(parents=True, exist_ok=True)
    rootfs = cache_dir / f"rootfs-{source.suite}.partial"
    shutil.rmtree(rootfs, ignore_errors=True)
    command = [
        "debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
        f"--cache-dir={debs}", source.suite, str(rootfs), source.uri,
    ]
    progress("running: " + " ".join(command))
    _run_streaming(command, progress)
    _add_user(rootfs)
    _add_statx_shim(rootfs)
    _add_reporter(rootfs)
    _trim(rootfs)
    partial = tarball.with_suffix(".tar.partial")
    progress(f"packing rootfs into {tarball}")
    with tarfile.open(partial, "w") as tar:
        tar.add(rootfs, arcname=".")
    partial.replace(tarball)
    shutil.rmtree(rootfs, ignore_errors=True)


def _run_streaming(command: list[str], progress: Progress) -> None:
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        tail: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            progress("  " + line.rstrip())
            tail = (tail + [line.rstrip()])[-5:]
        if proc.wait() != 0:
            raise ImageBuildError(
                f"debootstrap failed (exit {proc.returncode}): {' | '.join(tail)}", command=command,
            )


def _add_user(rootfs: Path) -> None:
    """Append the sandbox user to the rootfs' account files (no chroot needed)."""
    etc = rootfs / "etc"
    with open(etc / "passwd", "a", encoding="utf-8") as f:
        f.write(f"{SANDBOX_USER_NAME}:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/home/{SANDBOX_USER_NAME}:/bin/bash\n")
    with open(etc / "group", "a", encoding="utf-8") as f:
        f.write(f"{SANDBOX_USER_NAME}:x:{SANDBOX_UID}:\n")
    with open(etc / "shadow", "a", encoding="utf-8") as f:
        f.write(f"{SANDBOX_USER_NAME}:!:19000:0:99999:7:::\n")
    home = rootfs / "home" / SANDBOX_USER_NAME
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, SANDBOX_UID, SANDBOX_UID)
    (rootfs / "workspace").mkdir(exist_ok=True)
    os.chown(rootfs / "workspace", SANDBOX_UID, SANDBOX_UID)


def _add_statx_shim(rootfs: Path) -> None:
    """Compile the statx shim into the rootfs and preload it in every process
    (``/etc/ld.so.preload``: root-owned on a read-only root, so no process in
    the sandbox can drop it, and no environment variable is needed). The host
    runs the same suite as the image, so its compiler targets the image's libc."""
    target = rootfs / SHIM_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    source = rootfs.parent / "statx_compat.c"
    source.write_text(SHIM_SOURCE, encoding="utf-8")
    command = ["cc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(target), str(source)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    source.unlink()
    if proc.returncode != 0:
        raise ImageBuildError(f"compiling the statx shim failed: {proc.stderr.strip()[-500:]}", command=command)
    target.chmod(0o755)
    (rootfs / "etc" / "ld.so.preload").write_text("/" + SHIM_PATH + "\n", encoding="utf-8")


def _add_reporter(rootfs: Path) -> None:
    """The evidence reporter, root-owned on the read-only root: nothing run
    in the sandbox can change it before pytest loads it."""
    target = rootfs / REPORTER_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(REPORTER_SOURCE, encoding="utf-8")
    target.chmod(0o644)


def _trim(rootfs: Path) -> None:
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale"):
        target = rootfs / sub
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)


def _import(client: docker.DockerClient, tarball: Path, tag: str, source: AptSource, digest: str) -> str:
    repository, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    changes = [
        "WORKDIR /workspace",
        f"USER {SANDBOX_UID}:{SANDBOX_UID}",
        'CMD ["sleep", "infinity"]',
        f"LABEL escrow.recipe={digest} escrow.suite={source.suite}",
    ]
    try:
        client.api.import_image(src=str(tarball), repository=repository, tag=version, changes=changes)
        image_id = client.images.get(tag).id
    except docker.errors.DockerException as exc:
        raise ImageBuildError(f"docker import of {tarball} failed: {exc}", tag=tag) from exc
    if image_id is None:  # the SDK types the id optional; the daemon always reports one
        raise ImageBuildError(f"docker import of {tarball} left no image id", tag=tag)
    return image_id
