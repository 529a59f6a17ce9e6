"""Whose fault a failed step is: the workspace's or the infrastructure's.
The same step on the starting copy alone, in a fresh container (the
canary), tells which."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import docker.errors

from sandbox.errors import InfraFailure, SandboxError, WorkspaceFault

# What a failing sandbox, export or verifier raises when the fault may be
# either the workspace's or the infrastructure's; the canary tells which.
INFRA_SUSPECTS: tuple[type[Exception], ...] = (SandboxError, docker.errors.DockerException, OSError)


def blame(step: str, failure: Exception, canary: Callable[[], object]) -> NoReturn:
    """Run ``canary`` (``step`` on the starting copy alone, in a fresh
    container) after ``step`` failed with ``failure``: WorkspaceFault when it
    succeeds (the workspace's doing), InfraFailure with both failures when it
    fails too (a dead daemon, a broken runtime)."""
    cause = f"{type(failure).__name__}: {failure}"
    try:
        canary()
    except INFRA_SUSPECTS as again:
        raise InfraFailure(f"{step} failed ({cause[:1000]}), and so did the same step on the starting copy alone "
                           f"(the canary: {type(again).__name__}: {str(again)[:1000]})",
                           step=step, failure=cause, canary=f"{type(again).__name__}: {again}") from failure
    raise WorkspaceFault(f"{step} failed on this workspace ({cause[:1000]}), while the same step on the starting "
                         "copy alone succeeded (the canary): the workspace's content caused it",
                         step=step, failure=cause) from failure
