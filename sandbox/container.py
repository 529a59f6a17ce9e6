"""One hardened container per run.

Lifecycle: remove orphans of dead runs, create the container from the
Hardening spec (labelled with the run id and owner), copy the repo in as a
tar (the workspace is a size-limited tmpfs: the only writable place besides
/tmp, and never the user's checkout), run commands, export the workspace and
diff it into a Patch, remove the container. ``fresh`` starts another
container from the same spec, sharing nothing with this one, filled with a
given state (the verifier's).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import docker
import docker.errors

from policies import Policy
from sandbox.capture import StreamCapture
from sandbox.daemon import require_image
from sandbox.errors import ExecError, SandboxError, WorkspaceError
from sandbox.execution import REAP, ExecLimits, ExecOutcome, run_exec, wrap_command
from sandbox.export_stream import ExportLimits, ExportParser, TreeBuilder
from sandbox.hardening import SANDBOX_ENV, WORKSPACE, Hardening
from sandbox.hostgit import PrivateGit
from sandbox.orphans import claim_state_dir, owner_labels, removal_under_way, remove_dead_state_dirs, remove_orphans
from sandbox.verifier_view import (
    INSTALLED_MODULES_SCRIPT,
    VerifierCopy,
    binary_text_flags,
    installed_modules,
    plan_copy,
    stream_archive,
)
from sandbox.workspace import Patch, commit_export, diff_patch, snapshot, tree_entries

_SETUP_LIMITS = ExecLimits(timeout_s=120, stdout_cap=4096, stderr_cap=4096)
_LISTING_LIMITS = ExecLimits(timeout_s=120, stdout_cap=1 << 20, stderr_cap=4096)
_EXPORT = resources.files("sandbox").joinpath("export_script.py").read_text(encoding="utf-8")
REAP_TIMEOUT_S = 30.0  # a fork bomb at the pids limit may refuse the reaper a process for a while


# How long a close waits for another closer's removal of the same container.
REMOVAL_WAIT_S = 60.0


class Sandbox:
    """A running sandbox container. Use ``Sandbox.start(...)`` and ``close()``
    (or a ``with`` block)."""

    def __init__(self, client: docker.DockerClient, container: Any, spec: Hardening, run_id: str,
                 state_dir: Path, own_state_dir: bool, git: PrivateGit | None = None, base: str = "") -> None:
        self.client = client
        self.container = container
        self.spec = spec
        self.run_id = run_id
        self.state_dir = state_dir
        self.git = git  # the private repo holding the starting copy (None in a verifier's sandbox)
        self.base = base
        self._own_state_dir = own_state_dir
        self._exports = 0
        self._installed: frozenset[str] | None = None
        self._base_entries: dict[bytes, tuple[str, str]] | None = None
        self.hidden: tuple[str, ...] = ()  # [verify] hidden: in the starting copy, not in this container

    @classmethod
    def start(cls, client: docker.DockerClient, image: str, policy: Policy, repo: Path, *,
              run_id: str | None = None, state_dir: Path | None = None) -> "Sandbox":
        """Create, start and fill a sandbox for ``repo`` (copied, never mounted)."""
        require_image(client, image)
        remove_orphans(client)
        remove_dead_state_dirs()
        run_id = run_id or uuid.uuid4().hex
        spec = Hardening.from_policy(image, policy)
        own = state_dir is None
        state = Path(tempfile.mkdtemp(prefix=f"escrow-{run_id[:12]}-")) if state_dir is None else state_dir
        state.mkdir(parents=True, exist_ok=True)
        if own:
            claim_state_dir(state, run_id)
        git = PrivateGit(state).init()
        archive, base = snapshot(repo, git, spec.workspace_bytes, policy.verify.hidden)
        sandbox = cls._launch(client, spec, run_id, f"escrow-{run_id[:24]}", archive, state, own, git, base)
        sandbox.hidden = policy.verify.hidden
        return sandbox

    def fresh(self, archive: bytes | Iterable[bytes], role: str) -> "Sandbox":
        """Another container from this one's spec, filled with ``archive`` (a
        tar, whole or as a stream) and nothing else: no shared /tmp, home,
        processes or workspace."""
        self._exports += 1
        state = Path(tempfile.mkdtemp(prefix=f"escrow-{self.run_id[:12]}-{role}-"))
        claim_state_dir(state, self.run_id)
        return Sandbox._launch(self.client, self.spec, self.run_id, f"escrow-{self.run_id[:24]}-{role}{self._exports}",
                               archive, state, True, None, "")

    @classmethod
    def _launch(cls, client: docker.DockerClient, spec: Hardening, run_id: str, name: str,
                archive: bytes | Iterable[bytes],
                state: Path, own: bool, git: PrivateGit | None, base: str) -> "Sandbox":
        try:
            container = client.containers.create(**spec.create_kwargs(owner_labels(run_id)), name=name)
            container.start()
        except docker.errors.DockerException as exc:
            if own:
                shutil.rmtree(state, ignore_errors=True)
            raise SandboxError(f"could not start the sandbox container: {exc}", run_id=run_id) from exc
        sandbox = cls(client, container, spec, run_id, state, own, git, base)
        try:
            sandbox._copy_in(archive)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def exec(self, argv: list[str], limits: ExecLimits, *, stdin: bytes | Iterable[bytes] | None = None,
             stdout_capture: StreamCapture | None = None, cancel: threading.Event | None = None) -> ExecOutcome:
        """Run ``argv`` (no shell) as the sandbox user with an empty environment,
        under the per-command timeout. When it ends, times out or is canceled,
        the host reaps every process it started, whatever became of its wrapper."""
        if any("\x00" in a for a in argv):
            raise ExecError("argument contains a NUL byte", run_id=self.run_id)
        try:
            return run_exec(self.client.api, self.container.id, wrap_command(argv, SANDBOX_ENV, limits.timeout_s),
                            user=self.spec.user, workdir=WORKSPACE, limits=limits, stdin=stdin,
                            on_deadline=self._start_reaper, stdout_capture=stdout_capture, cancel=cancel)
        finally:
            self.reap()

    def bash(self, command: str, limits: ExecLimits, *, cancel: threading.Event | None = None) -> ExecOutcome:
        return self.exec(["/bin/bash", "-c", command], limits, cancel=cancel)

    def _start_reaper(self) -> None:
        """Start the reaper and return at once: called while the command's
        stream is still open, and dockerd may not report the reaper done until
        that stream is drained (a flood). ``reap`` confirms it afterwards."""
        try:
            exec_id = self.client.api.exec_create(self.container.id, ["/bin/bash", "-c", REAP], user=self.spec.user)[
                "Id"
            ]
            self.client.api.exec_start(exec_id, detach=True)
        except docker.errors.APIError:
            pass  # e.g. the pids limit is saturated; the confirming reap retries

    def reap(self) -> None:
        """Kill every process of the sandbox user (see REAP): only the
        container's init and main process, which run as another user, remain.
        Retried while the pids limit refuses the reaper a process."""
        api = self.client.api
        deadline = time.monotonic() + REAP_TIMEOUT_S
        while True:
            try:
                exec_id = api.exec_create(self.container.id, ["/bin/bash", "-c", REAP], user=self.spec.user)["Id"]
                api.exec_start(exec_id, detach=True)  # detached: polled below, never a blocking read
                while (info := api.exec_inspect(exec_id)).get("Running") and time.monotonic() < deadline:
                    time.sleep(0.01)
                if info.get("ExitCode") == 0:
                    return
            except docker.errors.APIError as exc:
                self._require_running(exc)
            if time.monotonic() > deadline:
                raise ExecError("could not reap the sandbox's processes", run_id=self.run_id)
            time.sleep(0.05)

    def _require_running(self, cause: Exception) -> None:
        try:
            state = self.inspect().get("State", {})
        except docker.errors.DockerException as exc:
            raise ExecError(f"sandbox container is gone: {exc}", run_id=self.run_id) from cause
        if not state.get("Running"):
            raise ExecError(f"sandbox container is not running (exit code {state.get('ExitCode')})",
                            run_id=self.run_id) from cause

    def inspect(self) -> dict[str, Any]:
        return self.client.api.inspect_container(self.container.id)

    @property
    def export_limits(self) -> ExportLimits:
        return ExportLimits(max_total_bytes=self.spec.workspace_bytes)

    def patch(self) -> Patch:
        """The workspace now, as a patch against the starting copy: exported as
        framed data by a script in the container, parsed under caps on the
        host and fed into the private git dir as blobs (never extracted)."""
        if self.git is None:
            raise WorkspaceError("this sandbox has no starting copy to diff against", run_id=self.run_id)
        limits = self.export_limits
        self._exports += 1
        tree = TreeBuilder(self.git)
        parser = ExportParser(limits, tree)
        try:
            outcome = self.exec(["/usr/bin/python3", "-I", "-S", "-c", _EXPORT], _SETUP_LIMITS,
                                stdin=limits.script_input(), stdout_capture=parser)
            if outcome.exit_code != 0 or outcome.timed_out:
                raise WorkspaceError(f"could not export the workspace (exit {outcome.exit_code}): "
                                     f"{outcome.stderr.text()[:500]}", run_id=self.run_id)
            after = commit_export(parser, self.git, self.base, f"refs/heads/export-{self._exports}", self.hidden)
        finally:
            tree.abort()
        return diff_patch(self.git, self.base, after, tuple(parser.skipped), limits)

    def archive_of(self, patch: Patch) -> Iterator[bytes]:
        """The starting copy with ``patch`` applied, as a tar stream for ``fresh``."""
        if self.git is None or not patch.tree:
            raise WorkspaceError("the patch has no recorded state to verify", run_id=self.run_id)
        return stream_archive(self.git, tree_entries(self.git, patch.tree), self.spec.workspace_bytes)

    def verifier_copy(self, patch: Patch, policy: Policy) -> VerifierCopy:
        """What the verifier's container holds for ``patch`` under ``policy``
        (``sandbox.verifier_view``): its entries and the patch's flags."""
        if self.git is None or not patch.tree:
            raise WorkspaceError("the patch has no recorded state to verify", run_id=self.run_id)
        if self._base_entries is None:  # the starting copy never changes: listed once
            self._base_entries = tree_entries(self.git, self.base)
        after = tree_entries(self.git, patch.tree)
        copy = plan_copy(self._base_entries, after, policy.verify, policy.paths.deny, self.installed_modules())
        binary = binary_text_flags(self.git, self.base, patch.tree, after)
        return VerifierCopy(entries=copy.entries, flags=tuple(sorted((*copy.flags, *binary), key=lambda f: f.path)))

    def archive_for(self, copy: VerifierCopy) -> Iterator[bytes]:
        """``copy`` as a tar stream for ``fresh``."""
        if self.git is None:
            raise WorkspaceError("this sandbox has no private git dir to read the copy from", run_id=self.run_id)
        return stream_archive(self.git, copy.entries, self.spec.workspace_bytes)

    def installed_modules(self) -> frozenset[str]:
        """The import names the image's interpreter finds before any workspace
        file (listed once per sandbox, with ``-I`` from the read-only root)."""
        if self._installed is None:
            outcome = self.exec(["/usr/bin/python3", "-I", "-c", INSTALLED_MODULES_SCRIPT], _LISTING_LIMITS)
            if outcome.exit_code != 0:
                raise WorkspaceError(f"listing the image's Python modules failed: {outcome.stderr.text()[:300]}",
                                     run_id=self.run_id)
            self._installed = installed_modules(outcome.stdout.text())
        return self._installed

    def close(self) -> None:
        """Remove the container and the host-side state (idempotent)."""
        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if not removal_under_way(exc):
                raise SandboxError(f"could not remove sandbox container {self.container.name}: {exc}") from exc
            self._wait_removed()
        except docker.errors.DockerException as exc:
            raise SandboxError(f"could not remove sandbox container {self.container.name}: {exc}") from exc
        finally:
            if self._own_state_dir:
                shutil.rmtree(self.state_dir, ignore_errors=True)

    def _wait_removed(self) -> None:
        """Another closer (a second ``close``, a sweep of orphans) is removing
        the container: done once dockerd says it is gone."""
        try:
            self.container.wait(condition="removed", timeout=REMOVAL_WAIT_S)
        except docker.errors.NotFound:
            pass
        except Exception as exc:  # a timeout arrives as a requests error, not a DockerException
            raise SandboxError(f"sandbox container {self.container.name} was still being removed after "
                               f"{REMOVAL_WAIT_S:g}s: {exc}") from exc

    def _copy_in(self, archive: bytes | Iterable[bytes]) -> None:
        script = ('tar -x -C /workspace -f - && cd /workspace && git init -q && git add -A && '
                  'git -c user.name=escrow -c user.email=escrow@localhost commit -q --allow-empty -m "starting copy"')
        outcome = self.exec(["/bin/bash", "-c", script], _SETUP_LIMITS, stdin=archive)
        if outcome.exit_code != 0:
            raise WorkspaceError(f"copying the repo into the sandbox failed: {outcome.stderr.text()[:500]}",
                                 run_id=self.run_id)
