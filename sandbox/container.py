"""One hardened container per run.

Lifecycle: remove orphans of dead runs, create the container from the
Hardening spec (labelled with the run id and owner), copy the repo in as a
tar (the workspace is a size-limited tmpfs: the only writable place besides
/tmp, and never the user's checkout), run commands, export the workspace and
diff it into a Patch, remove the container. ``fresh`` starts another
container from the same spec, sharing nothing with this one, filled with a
given state (the verifier's, made by ``starting``: ``sandbox.starting_copy``).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import docker
import docker.errors

from policies import Policy
from sandbox.capture import BytesCapture, StreamCapture
from sandbox.daemon import require_image
from sandbox.errors import ExecError, ExecutorBroken, SandboxError, WorkspaceError
from sandbox.execution import FLOOD_FACTOR, SETUP_LIMITS, ExecLimits, ExecOutcome, FileOpOutcome
from sandbox.executor import Ending, ExecutorChannel
from sandbox.export_stream import ExportLimits, ExportParser, TreeBuilder
from sandbox.hardening import SANDBOX_ENV, WORKSPACE, Hardening
from sandbox.hostgit import PrivateGit
from sandbox.orphans import claim_state_dir, owner_labels, removal_under_way, remove_dead_state_dirs, remove_orphans
from sandbox.runtime import RuntimeName
from sandbox.starting_copy import StartingCopy
from sandbox.verifier_view import INSTALLED_MODULES_SCRIPT, installed_modules
from sandbox.workspace import Patch, commit_export, diff_patch, snapshot

_LISTING_LIMITS = ExecLimits(timeout_s=120, stdout_cap=1 << 20, stderr_cap=4096)
_EXPORT = resources.files("sandbox").joinpath("export_script.py").read_text(encoding="utf-8")
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
        self._exports = itertools.count(1)  # next() is atomic: an early verifier starts in a thread
        self._installed: frozenset[str] | None = None
        self._starting = StartingCopy(git, base, spec.workspace_bytes, run_id) if git is not None else None
        self.hidden: tuple[str, ...] = ()  # [verify] hidden: in the starting copy, not in this container
        self._on_close: list[Callable[[], None]] = []
        self.channel: ExecutorChannel  # set by _start_executor

    @classmethod
    def start(cls, client: docker.DockerClient, image: str, policy: Policy, repo: Path, *,
              run_id: str | None = None, state_dir: Path | None = None,
              runtime: RuntimeName = "runc") -> "Sandbox":
        """Create, start and fill a sandbox for ``repo`` (copied, never mounted),
        under ``runtime`` (sandbox.runtime.choose_runtime picks it)."""
        require_image(client, image)
        remove_orphans(client)
        remove_dead_state_dirs()
        run_id = run_id or uuid.uuid4().hex
        spec = Hardening.from_policy(image, policy, runtime)
        own = state_dir is None
        state = Path(tempfile.mkdtemp(prefix=f"escrow-{run_id[:12]}-")) if state_dir is None else state_dir
        state.mkdir(parents=True, exist_ok=True)
        if own:
            claim_state_dir(state, run_id)
        git = PrivateGit(state).init()
        archive, base = snapshot(repo, git, spec.workspace_bytes, policy.verify.hidden)
        sandbox = cls._launch(client, spec, run_id, f"escrow-{run_id[:24]}", archive, state, own, git, base,
                              make_repo=True)
        sandbox.hidden = policy.verify.hidden
        return sandbox

    def fresh(self, archive: bytes | Iterable[bytes], role: str) -> "Sandbox":
        """Another container from this one's spec, filled with ``archive`` (a
        tar, whole or as a stream) and nothing else: no shared /tmp, home,
        processes or workspace."""
        number = next(self._exports)
        state = Path(tempfile.mkdtemp(prefix=f"escrow-{self.run_id[:12]}-{role}-"))
        claim_state_dir(state, self.run_id)
        return Sandbox._launch(self.client, self.spec, self.run_id, f"escrow-{self.run_id[:24]}-{role}{number}",
                               archive, state, True, None, "")

    @classmethod
    def _launch(cls, client: docker.DockerClient, spec: Hardening, run_id: str, name: str,
                archive: bytes | Iterable[bytes],
                state: Path, own: bool, git: PrivateGit | None, base: str, make_repo: bool = False) -> "Sandbox":
        try:
            container = client.containers.create(**spec.create_kwargs(owner_labels(run_id)), name=name)
        except docker.errors.DockerException as exc:
            if own:
                shutil.rmtree(state, ignore_errors=True)
            raise SandboxError(f"could not create the sandbox container: {exc}", run_id=run_id) from exc
        sandbox = cls(client, container, spec, run_id, state, own, git, base)
        try:
            sandbox._start_executor()
            sandbox._copy_in(archive, make_repo)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def _start_executor(self) -> None:
        """Attach to the executor's stdio before it starts (so its hello is
        never missed), start the container, and wait for the hello."""
        try:
            raw = self.client.api.attach_socket(self.container.id,
                                                params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            self.channel = ExecutorChannel(raw, self.container.id, self.run_id)
            self.container.start()
        except docker.errors.DockerException as exc:
            raise SandboxError(f"could not start the sandbox container: {exc}", run_id=self.run_id) from exc
        hello = self.channel.hello()
        if hello.get("uid") != 0:
            raise SandboxError(f"the sandbox's executor runs as uid {hello.get('uid')}, not as the container's "
                               "main user", run_id=self.run_id)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def exec(self, argv: list[str], limits: ExecLimits, *, stdin: bytes | Iterable[bytes] | None = None,
             stdout_capture: StreamCapture | None = None, cancel: threading.Event | None = None,
             env: Mapping[str, str] | None = None) -> ExecOutcome:
        """Run ``argv`` (no shell) through the executor, as the sandbox user
        with the sandbox's fixed environment (plus the host's ``env``), under
        the per-command timeout. Whatever
        its ending, the executor answers only once every process it started
        is gone (``ExecutorBroken`` if any survived, or if it broke)."""
        if any("\x00" in a for a in argv):
            raise ExecError("argument contains a NUL byte", run_id=self.run_id)
        out, err = stdout_capture or StreamCapture(limits.stdout_cap), StreamCapture(limits.stderr_cap)
        flood = FLOOD_FACTOR * (limits.stdout_cap + limits.stderr_cap) + getattr(out, "limit", 0)
        request = {"op": "exec", "argv": argv, "env": SANDBOX_ENV | dict(env or {}), "cwd": WORKSPACE,
                   "timeout_s": limits.timeout_s, "stdin": stdin is not None, "flood_bytes": flood}
        ending = self._request(request, timeout_s=limits.timeout_s, stdin=stdin, cancel=cancel,
                               on_output=lambda kind, data: (out if kind == "O" else err).feed(data))
        result = ending.result
        self._require_reaped(result)
        if out.total + err.total > flood + (1 << 16):
            self.channel.broken = "it forwarded more output than the flood cap"
            raise ExecutorBroken("the sandbox's executor forwarded more output than the flood cap",
                                 run_id=self.run_id)
        how = result.get("ending")
        return ExecOutcome(exit_code=result.get("exit_code"), stdout=out.result(), stderr=err.result(),
                           duration_s=float(result.get("duration_s", 0.0)), timed_out=how == "timeout",
                           flooded=how == "flood", canceled=how == "cancel" or ending.canceled_by_host)

    def file_op(self, request: dict[str, object], judge: Callable[[str], bool], limits: ExecLimits, *,
                cancel: threading.Event | None = None) -> FileOpOutcome:
        """One file operation in one round trip: the executor resolves the
        path beneath the workspace and holds it open, ``judge`` (the ACL, on
        the host) rules on the resolved path, and only then does the op run,
        on what was resolved."""
        ending = self._request({"op": "file", "file": request, "timeout_s": limits.timeout_s},
                               timeout_s=limits.timeout_s, on_resolved=judge, cancel=cancel)
        result = ending.result
        reply = result.get("reply")
        how = result.get("ending")
        return FileOpOutcome(reply=reply if isinstance(reply, dict) else None,
                             duration_s=float(result.get("duration_s", 0.0)), timed_out=how == "timeout",
                             canceled=how == "cancel" or ending.canceled_by_host)

    def _request(self, request: dict[str, Any], **kwargs: Any) -> Ending:
        """One executor request; a broken executor is reported with its
        container's state (a stopped container is the commonest cause)."""
        try:
            return self.channel.request(request, **kwargs)
        except ExecutorBroken as exc:
            try:
                state = self.inspect().get("State", {})
            except docker.errors.DockerException as gone:
                raise ExecutorBroken(f"{exc}; the sandbox container is gone: {gone}", run_id=self.run_id) from exc
            if not state.get("Running"):
                raise ExecutorBroken(f"{exc}; the sandbox container is not running (exit code "
                                     f"{state.get('ExitCode')})", run_id=self.run_id) from exc
            raise

    def bash(self, command: str, limits: ExecLimits, *, cancel: threading.Event | None = None,
             env: Mapping[str, str] | None = None) -> ExecOutcome:
        return self.exec(["/bin/bash", "-c", command], limits, cancel=cancel, env=env)

    def read_file(self, path: str, cap: int) -> tuple[bytes, bool]:
        """At most ``cap`` bytes of a file in the container, read by the
        sandbox user, and whether there was more (a missing file reads empty)."""
        capture = BytesCapture(cap)
        self.exec(["/bin/cat", "--", path], ExecLimits(timeout_s=60, stdout_cap=4096, stderr_cap=4096),
                  stdout_capture=capture)
        return bytes(capture.data[:cap]), capture.overflowed or capture.total > cap

    def refill(self, archive: bytes | Iterable[bytes]) -> None:
        """Empty the workspace and extract ``archive`` into it: a verifier's
        container that first ran the trusted pre-pass on the starting copy."""
        outcome = self.exec(["/bin/bash", "-c", "find /workspace -mindepth 1 -delete && tar -x -C /workspace -f -"],
                            SETUP_LIMITS, stdin=archive)
        if outcome.exit_code != 0:
            raise WorkspaceError(f"refilling the verifier's workspace failed: {outcome.stderr.text()[:500]}",
                                 run_id=self.run_id)

    def _require_reaped(self, result: dict[str, Any]) -> None:
        if result.get("left"):
            self.channel.broken = f"{result['left']} processes outlived their command"
            raise ExecutorBroken(f"{result['left']} of the sandbox's processes outlived their command and could "
                                 "not be killed", run_id=self.run_id)

    def processes(self) -> list[tuple[int, int, str]]:
        """(pid, uid, command) of every process in the container besides init
        and the executor, as a separate ``docker exec`` sees them: the host's
        own check that nothing outlived a command."""
        code, out = self.container.exec_run(["ps", "-eo", "pid=,uid=,args="], user=self.spec.user)
        if code != 0:
            raise ExecError(f"listing the sandbox's processes failed: {out[:300]!r}", run_id=self.run_id)
        found = []
        for line in out.decode("utf-8", "replace").splitlines():
            pid, uid, *args = line.split(None, 2)
            found.append((int(pid), int(uid), args[0] if args else ""))
        return [(pid, uid, args) for pid, uid, args in found
                if pid not in (1, self.channel.pid) and not args.startswith("ps -eo")]

    def inspect(self) -> dict[str, Any]:
        return self.client.api.inspect_container(self.container.id)

    @property
    def export_limits(self) -> ExportLimits:
        return ExportLimits(max_total_bytes=self.spec.workspace_bytes, max_files=self.spec.workspace_files)

    def patch(self) -> Patch:
        """The workspace now, as a patch against the starting copy: exported as
        framed data by a script in the container, parsed under caps on the
        host and fed into the private git dir as blobs (never extracted)."""
        if self.git is None:
            raise WorkspaceError("this sandbox has no starting copy to diff against", run_id=self.run_id)
        number = next(self._exports)
        tree = TreeBuilder(self.git)
        try:
            parser = self._export(self, tree)
            after = commit_export(parser, self.git, self.base, f"refs/heads/export-{number}", self.hidden)
        finally:
            tree.abort()
        return diff_patch(self.git, self.base, after, tuple(parser.skipped), self.export_limits)

    def _export(self, source: "Sandbox", tree: TreeBuilder) -> ExportParser:
        """Run the export script in ``source``'s workspace, parsed into ``tree``."""
        limits = self.export_limits
        parser = ExportParser(limits, tree)
        outcome = source.exec(["/usr/bin/python3", "-I", "-S", "-c", _EXPORT], SETUP_LIMITS,
                              stdin=limits.script_input(), stdout_capture=parser)
        if outcome.exit_code != 0 or outcome.timed_out:
            raise WorkspaceError(f"could not export the workspace (exit {outcome.exit_code}"
                                 f"{', killed: timeout' if outcome.timed_out else ''}): "
                                 f"{outcome.stderr.text()[:500]}", run_id=self.run_id)
        return parser

    def export_canary(self) -> None:
        """The export, with the same script and limits, of the starting copy
        alone in a fresh container: raises what that export raises (nothing
        is kept). Run only after the workspace's export failed."""
        starting = self.starting
        with self.fresh(starting.archive_for(starting.unpatched()), "canary") as canary:
            tree = TreeBuilder(starting.git)
            try:
                self._export(canary, tree).finish()
            finally:
                tree.abort()

    @property
    def starting(self) -> StartingCopy:
        """The starting copy and what is made of it for fresh containers (a
        verifier's sandbox has none)."""
        if self._starting is None:
            raise WorkspaceError("this sandbox has no starting copy", run_id=self.run_id)
        return self._starting

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

    def on_close(self, action: Callable[[], None]) -> None:
        """Run ``action`` first when this sandbox closes (an early verifier's
        removal: whatever ends the run removes it with the run)."""
        self._on_close.append(action)

    def close(self) -> None:
        """Remove what ``on_close`` holds, the container and the host-side
        state (idempotent)."""
        actions, self._on_close = self._on_close, []
        try:
            for action in actions:
                action()
        finally:
            self._close_own()

    def _close_own(self) -> None:
        channel = getattr(self, "channel", None)
        if channel is not None:
            channel.close()
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

    def _copy_in(self, archive: bytes | Iterable[bytes], make_repo: bool) -> None:
        """Extract ``archive`` into the workspace. The model's container then
        makes its repository of the starting copy; a fresh container's
        archive brings one (``StartingCopy.repo``)."""
        script = 'tar -x -C /workspace -f -'
        if make_repo:
            script += (' && cd /workspace && git init -q && git add -A && git -c user.name=escrow '
                       '-c user.email=escrow@localhost commit -q --allow-empty -m "starting copy"')
        outcome = self.exec(["/bin/bash", "-c", script], SETUP_LIMITS, stdin=archive)
        if outcome.exit_code != 0:
            raise WorkspaceError(f"copying the repo into the sandbox failed: {outcome.stderr.text()[:500]}",
                                 run_id=self.run_id)
