"""Sandbox errors. Each carries an ``exit_code`` for the CLI and a message that
says what to do next."""

from __future__ import annotations

from orchestrator.errors import EscrowError
from orchestrator.exit_codes import ExitCode


class SandboxError(EscrowError):
    """Base of everything the sandbox raises on purpose."""

    exit_code = ExitCode.SANDBOX_FAILED


class DaemonUnavailable(SandboxError):
    """No Docker daemon answers at the configured address."""

    exit_code = ExitCode.DAEMON_UNAVAILABLE


class ImageMissing(SandboxError):
    """The sandbox image tag is not present in the local daemon."""

    exit_code = ExitCode.IMAGE_MISSING


class RuntimeMissing(SandboxError):
    """The runtime asked for (``--runtime runsc``) is not registered with dockerd."""

    exit_code = ExitCode.RUNTIME_MISSING


class ImageBuildError(SandboxError):
    """debootstrap or ``docker import`` failed, or the host cannot build."""

    exit_code = ExitCode.IMAGE_BUILD_FAILED


class ExecError(SandboxError):
    """The daemon failed to run a command (not: the command failed)."""


class ExecutorBroken(ExecError):
    """The sandbox's executor died, went silent or broke its protocol. It is
    never used again: the run ends INFRA_ERROR rather than trust it."""


class WorkspaceError(SandboxError):
    """The repo could not be copied in, or the patch could not be made or applied."""


class ExportRefused(WorkspaceError):
    """The workspace broke an export cap (files, bytes, patch size) or the
    export stream was malformed. The model's doing: a submit reports it as a
    failed submit; nothing of the export reached the host as a path."""


class WorkspaceFault(ExportRefused):
    """The export or the verifier failed on the workspace while the same step
    on the starting copy alone (the canary) succeeded: the workspace's
    content caused it, so it is the model's verdict, never INFRA_ERROR."""


class InfraFailure(SandboxError):
    """The export or the verifier failed and so did its canary on the
    starting copy alone: the infrastructure is at fault (INFRA_ERROR, with
    both failures in the message and the context)."""


class GitTimeout(WorkspaceError):
    """A host git call ran past its timeout (and was killed)."""


class ApplyRefused(WorkspaceError):
    """``--apply`` refused: the patch's hash does not match the verdict, or it
    touches flagged paths (.git, CI configuration, outside the repo) that the
    policy's ``[apply]`` section does not allow. Nothing was written."""

    exit_code = ExitCode.APPLY_REFUSED
