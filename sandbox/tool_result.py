"""What a tool call gives the loop: a ``ToolResult``, shaped from a
command's or a file operation's outcome (``sandbox.toolbox`` runs them)."""

from __future__ import annotations

from orchestrator.contract import Captured, Frozen
from orchestrator.evidence import Evidence
from orchestrator.suspect import SuspectReason
from orchestrator.toolset import FileToolArgs
from policies import Policy
from policies.paths import first_match
from sandbox.execution import ExecOutcome, FileOpOutcome
from sandbox.workspace import Patch


class ToolResult(Frozen):
    """One tool call's outcome as the loop records it and the model reads it."""

    tool: str
    ok: bool
    exit_code: int | None
    observation: str
    stdout: Captured | None = None
    stderr: Captured | None = None
    duration_s: float
    timed_out: bool = False
    canceled: bool = False
    verifier_passed: bool | None = None
    evidence: Evidence | None = None  # what a submit's verdict rests on
    patch: Patch | None = None
    suspect: tuple[SuspectReason, ...] = ()  # why a passing submit cannot be trusted as PASS (orchestrator.suspect)
    resolved_path: str | None = None  # a file tool's path after symlinks, as the ACL judged it
    resolved_rule: str | None = None


def file_op_result(args: FileToolArgs, outcome: FileOpOutcome, reply: dict | None) -> ToolResult:
    """A file tool's result from the executor's ``reply`` (None: it did not complete)."""
    if reply is None:
        why = "timeout" if outcome.timed_out else "run canceled" if outcome.canceled else "no reply"
        return ToolResult(tool=args.name, ok=False, exit_code=None, duration_s=outcome.duration_s,
                          timed_out=outcome.timed_out, canceled=outcome.canceled,
                          observation=f"{args.name} did not complete (killed: {why})")
    ok = bool(reply.get("ok", False))
    observation = str(reply.get("error", "failed")) if not ok else args.describe(reply)
    return ToolResult(tool=args.name, ok=ok, exit_code=0 if ok else 1, observation=observation,
                      duration_s=outcome.duration_s, timed_out=outcome.timed_out, canceled=outcome.canceled)


def listing_without_denied(reply: dict, base: str, policy: Policy) -> dict:
    """A listing keeps no entry under a deny glob: the names below ``.git`` or
    ``secrets/**`` are as private as their contents. Hidden entries leave the
    total too, so not even their number shows."""
    def denied(entry: str) -> bool:
        rel = entry.rstrip("/@")
        path = rel if base in ("", ".") else f"{base}/{rel}"
        return first_match(policy.paths.deny, path) is not None
    kept = [e for e in reply["entries"] if not denied(e)]
    return reply | {"entries": kept, "total": reply["total"] - (len(reply["entries"]) - len(kept))}


def command_result(tool: str, outcome: ExecOutcome) -> ToolResult:
    """A command's result: its exit code, how it was killed, and its output."""
    parts = [f"exit code {outcome.exit_code}"]
    if outcome.timed_out:
        parts.append("(killed: timeout)")
    if outcome.flooded:
        parts.append("(killed: output flood)")
    if outcome.canceled:
        parts.append("(killed: run canceled)")
    text = " ".join(parts)
    if outcome.stdout.total_bytes:
        text += f"\n[stdout {outcome.stdout.total_bytes} bytes]\n{outcome.stdout.text()}"
    if outcome.stderr.total_bytes:
        text += f"\n[stderr {outcome.stderr.total_bytes} bytes]\n{outcome.stderr.text()}"
    return ToolResult(tool=tool, ok=outcome.exit_code == 0 and not outcome.timed_out, exit_code=outcome.exit_code,
                      observation=text, stdout=outcome.stdout, stderr=outcome.stderr,
                      duration_s=outcome.duration_s, timed_out=outcome.timed_out, canceled=outcome.canceled)
