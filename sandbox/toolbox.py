"""The single entry point the loop calls once the ACL has allowed a call:
``ToolBox.execute(name, args) -> ToolResult``. The ToolBox is the sandbox's
``ToolHost``: each tool, declared in ``orchestrator.toolset``, runs itself
against its three primitives (a command, a file operation, a submission).

File tools run inside the container, as the sandbox user, through the
sandbox's executor: the host never writes into the workspace, so a symlink
planted by an earlier command is resolved (and refused) where it lives.

``submit`` snapshots the workspace as one patch and runs the verifier on the
starting copy with that patch applied, in a fresh container that shares
nothing with the model's: what passes is exactly that patch (``submitted``),
less what the policy keeps the patch from deciding (``sandbox.verifier_view``:
protected and hidden inputs, denied paths, shadowing modules), each flagged.
A failed export or verifier is the workspace's fault or the infrastructure's
as the canary says (``sandbox.blame``); results are shaped by
``sandbox.tool_result``.
"""

from __future__ import annotations

import threading

from orchestrator.canonical import readable_text
from orchestrator.contract import ToolSpec
from orchestrator.evidence import (
    MAX_CHANNEL_BYTES,
    Channel,
    Evidence,
    Required,
    exit_code_only,
    is_pytest_command,
    judge,
    parse_channel,
    quotes_any,
    reporter_env,
    required_from_collection,
    secret_lines,
    summary_lines,
)
from orchestrator.toolset import FileToolArgs, ToolArgs, tool_specs
from policies import Decision, Effect, Policy, decide
from policies.paths import first_match
from sandbox.blame import INFRA_SUSPECTS, blame
from sandbox.container import Sandbox
from sandbox.early_verifier import EarlyVerifier
from sandbox.errors import ExportRefused, WorkspaceFault
from sandbox.execution import ExecLimits, ExecOutcome
from sandbox.patch_scan import suspect_reasons
from sandbox.tool_result import ToolResult, command_result, file_op_result, listing_without_denied
from sandbox.verifier_view import VerifierCopy
from sandbox.workspace import Patch, patch_paths

_MIN_TIMEOUT_S = 0.05
# The reporter's channels in the verifier's /tmp (fresh per container), read
# back by the host after each command under MAX_CHANNEL_BYTES.
_COLLECT_CHANNEL = "/tmp/escrow-evidence-collect.jsonl"
_RUN_CHANNEL = "/tmp/escrow-evidence-run.jsonl"


class ToolBox:
    """The tools of one run, bound to its sandbox, policy and verifier command."""

    # A verifier that holds the starting copy gets only what changed where
    # that is cheaper (None: ``StartingCopy.refill`` decides by file
    # size); True or False forces it (tests, bench_runtime's rows).
    copy_changed_only: bool | None = None

    def __init__(self, sandbox: Sandbox, policy: Policy, verifier_command: str | None = None,
                 cancel: threading.Event | None = None, verifier_patch: str | None = None,
                 required_tests: tuple[str, ...] = ()) -> None:
        self.sandbox = sandbox
        self.policy = policy
        self.verifier_command = verifier_command
        self.verifier_patch = verifier_patch  # the reference tests, applied in the verifier's container only
        self.submitted: Patch | None = None  # the patch of the last passing submit
        self.cancel = cancel  # set (Ctrl-C): the running command is killed at once
        # The tests a PASS needs: the task's named ones, else the pre-pass's
        # (run once, at the first submit); None once known to be exit code only.
        self._required: Required | None = Required(ids=required_tests, source="named") if required_tests else None
        self._required_known = bool(required_tests)
        self._early: EarlyVerifier | None = None  # the next submit's container, started early (start_early)
        self._early_wanted = False
        self._early_collects = False
        self._reference_paths: tuple[str, ...] | None = None
        self._secret_lines: frozenset[str] = frozenset()

    def start_early(self) -> None:
        """Start the next submit's verifier container now, in a thread
        (``sandbox.early_verifier``), with the pre-pass when that submit
        needs one; again after each failed submit. The sandbox's close
        removes what is not used."""
        command = self.verifier_command
        if self._early is not None or not command:
            return
        if not self._early_wanted:
            self._early_wanted = True
            self.sandbox.on_close(self.close)
        collects = self._needs_pre_pass(is_pytest_command(command))
        self._early_collects = collects
        self._early = EarlyVerifier(lambda stop: self._prepare_verifier(stop, collects))

    def close(self) -> None:
        """Stop an early verifier's pre-pass and remove its unused container."""
        early, self._early = self._early, None
        if early is not None:
            early.close()

    def _prepare_verifier(self, stop: threading.Event, collects: bool) -> tuple[Sandbox, Required | None]:
        """A verifier's fresh container on the starting copy and, when
        ``collects``, the pre-pass of ``_verify`` there, under the policy's
        limits (the run's remaining time is the run's to enforce: its end
        closes the sandbox, which stops this)."""
        r = self.policy.resources
        limits = ExecLimits(timeout_s=r.command_timeout_s, stdout_cap=r.stdout_cap_bytes,
                            stderr_cap=r.stderr_cap_bytes)
        verifier = self.sandbox.fresh(self.sandbox.starting.verifier_start(self.policy), "verify")
        try:
            required = self._collect_required(verifier, self.verifier_command or "", limits, stop) if collects else None
        except BaseException:
            verifier.close()
            raise
        return verifier, required

    def _take_early(self) -> tuple[Sandbox, Required | None] | None:
        """The early verifier's container and pre-pass, awaited (None when
        none was started or it failed: then the submit starts its own)."""
        early, self._early = self._early, None
        return early.take(self.cancel) if early is not None else None

    def specs(self) -> tuple[ToolSpec, ...]:
        return tool_specs(self.policy.tools.allowed)

    def limits(self, timeout_s: float | None = None, *, time_left_s: float | None = None) -> ExecLimits:
        """The policy's caps; the timeout is the smallest of the policy's, the
        call's and the run's remaining wall time."""
        r = self.policy.resources
        candidates = [r.command_timeout_s, timeout_s, time_left_s]
        timeout = max(min(t for t in candidates if t is not None), _MIN_TIMEOUT_S)
        return ExecLimits(timeout_s=timeout, stdout_cap=r.stdout_cap_bytes, stderr_cap=r.stderr_cap_bytes)

    def execute(self, name: str, args: ToolArgs, *, time_left_s: float | None = None) -> ToolResult:
        """Run one validated call the loop's ACL allowed, for at most
        ``time_left_s``. A file tool's path is judged once more after it is
        resolved in the container (``file_op``): only there is its target known."""
        if args.name != name:
            raise TypeError(f"arguments of {args.name} passed as {name}")
        result = args.run(self, time_left_s=time_left_s)
        # Names and output that are not UTF-8 reach the model as \xNN text: a
        # lone surrogate in a request is refused by servers and JSON parsers.
        shown = readable_text(result.observation)
        return result if shown == result.observation else result.model_copy(update={"observation": shown})

    def command(self, tool: str, command: str, timeout_s: float | None, *,
                time_left_s: float | None = None) -> ToolResult:
        outcome = self.sandbox.bash(command, self.limits(timeout_s, time_left_s=time_left_s), cancel=self.cancel)
        return command_result(tool, outcome)

    def submit(self, *, time_left_s: float | None = None) -> ToolResult:
        if not self.verifier_command:
            return ToolResult(tool="submit", ok=False, exit_code=None, duration_s=0.0, verifier_passed=False,
                              observation="no verifier is configured for this task; submit cannot be judged")
        result = self._submit(self.verifier_command, self.limits(time_left_s=time_left_s))
        if self._early_wanted and not result.verifier_passed and not (self.cancel and self.cancel.is_set()):
            self.start_early()  # the run goes on: the next submit's container, while the agent works
        return result

    def _submit(self, command: str, limits: ExecLimits) -> ToolResult:
        try:
            patch, copy = self._verifier_copy(self.workspace_patch())
            evidence_wanted = is_pytest_command(command)
            outcome, channel = self._verify_blaming(copy, evidence_wanted, limits)
        except WorkspaceFault as exc:
            return ToolResult(tool="submit", ok=False, exit_code=None, duration_s=0.0, verifier_passed=False,
                              observation=f"verifier FAILED: {exc}")
        except ExportRefused as exc:
            return ToolResult(tool="submit", ok=False, exit_code=None, duration_s=0.0, verifier_passed=False,
                              observation=f"submit refused, the verifier did not run: {exc}")
        evidence = self._evidence(outcome, channel, evidence_wanted)
        if evidence.passed:
            self.submitted = patch
        result = command_result("submit", outcome)
        return _with_suspect(self.sandbox, result.model_copy(update={
            "verifier_passed": evidence.passed, "ok": evidence.passed, "patch": patch, "evidence": evidence,
            "observation": self._submit_observation(patch, evidence, channel, result)}))

    def _needs_pre_pass(self, evidence_wanted: bool) -> bool:
        """Whether this submit first collects the required tests from the
        starting copy: a pytest verifier with no named tests, once a run."""
        return evidence_wanted and not self._required_known

    def _collect_required(self, verifier: Sandbox, command: str, limits: ExecLimits,
                          cancel: threading.Event | None) -> Required | None:
        """The trusted pre-pass: the verify command itself, collect-only,
        with the reporter, on the starting copy (hidden tests and reference
        tests included), in the verifier's container before the patch is laid
        over it. No code of the model's has run there yet. None when the
        reference tests do not apply or the reporter did not run."""
        if self._apply_verifier_patch(verifier, limits, cancel) is not None:
            return None
        verifier.bash(command, limits, cancel=cancel, env=reporter_env(_COLLECT_CHANNEL, "collect"))
        return required_from_collection(_read_channel(verifier, _COLLECT_CHANNEL))

    def _evidence(self, outcome: ExecOutcome, channel: Channel, evidence_wanted: bool) -> Evidence:
        """The evidence rule (``orchestrator.evidence.judge``), or the exit
        code alone for a verifier that is not pytest (or whose reporter did
        not run on the starting copy)."""
        if not evidence_wanted:
            return exit_code_only(outcome.exit_code, outcome.timed_out, "the verify command is not pytest")
        if self._required is None:
            return exit_code_only(outcome.exit_code, outcome.timed_out,
                                  "the reporter did not run on the starting copy")
        return judge(outcome.exit_code, outcome.timed_out, channel, self._required)

    @property
    def verifier_output(self) -> str:
        """``summary`` or ``full``: the policy's, else summary when hidden or
        reference tests exist (they are never quoted back)."""
        chosen = self.policy.verify.verifier_output
        if chosen is not None:
            return chosen
        return "summary" if self.policy.verify.hidden or self.verifier_patch else "full"

    def _quotable(self, path: str, message: str) -> bool:
        """Whether a failed test's message may be quoted: its file is one
        the model may read (not hidden, not a reference test, not denied),
        and it quotes no line of a hidden or reference test (code under
        test can read those in the verifier and raise them as a message)."""
        if self._reference_paths is None:
            self._reference_paths = patch_paths(self.verifier_patch) if self.verifier_patch else ()
            added = "\n".join(line[1:] for line in (self.verifier_patch or "").splitlines()
                              if line.startswith("+") and not line.startswith("+++"))
            hidden = self.sandbox.starting.texts(self.policy.verify.hidden)
            self._secret_lines = secret_lines("\n".join((added, *hidden)))
        return (path not in self._reference_paths and first_match(self.policy.verify.hidden, path) is None
                and first_match(self.policy.paths.deny, path) is None and not quotes_any(message, self._secret_lines))

    def _submit_observation(self, patch: Patch, evidence: Evidence, channel: Channel, result: ToolResult) -> str:
        """The verdict, the patch it is about, what was left out, the
        evidence; the verifier's own output only under ``full``."""
        verdict = "verifier PASSED" if evidence.passed else "verifier FAILED"
        about = f"on the submitted patch (sha256 {patch.sha256[:16]}, {len(patch.files)} files) in a fresh sandbox"
        skipped = "".join(f"\nnot exported: {s.path} ({s.reason})" for s in patch.skipped[:20])
        flagged = "".join(f"\nflagged: {f.path} ({f.reason}; {f.detail})" for f in patch.flagged[:20] if f.detail)
        if self.verifier_output == "full":
            lines = summary_lines(evidence, channel)
            return f"{verdict} {about}{skipped}{flagged}\n" + "\n".join(lines) + f"\n{result.observation}"
        lines = summary_lines(evidence, channel, self._quotable)
        code = f"exit code {result.exit_code}" + (" (killed: timeout)" if result.timed_out else "")
        withheld = "(the verifier's output is withheld: [verify] verifier_output = \"summary\")"
        return f"{verdict} {about}{skipped}{flagged}\n" + "\n".join([*lines, code, withheld])

    def workspace_patch(self) -> Patch:
        """The workspace as a patch. An export that fails where the same
        export of the starting copy alone succeeds (the canary) fails by the
        workspace's content: WorkspaceFault, the model's verdict; if the
        canary fails too, InfraFailure (INFRA_ERROR)."""
        try:
            return self.sandbox.patch()
        except ExportRefused:
            raise
        except INFRA_SUSPECTS as exc:
            blame("the export of the workspace", exc, self.sandbox.export_canary)

    def _verify_blaming(self, copy: VerifierCopy, evidence_wanted: bool,
                        limits: ExecLimits) -> tuple[ExecOutcome, Channel]:
        """The verifier on ``copy``; a failure of its sandbox is judged by the
        same step on the starting copy alone (``blame``)."""
        try:
            return self._verify(copy, evidence_wanted, limits)
        except ExportRefused:
            raise
        except INFRA_SUSPECTS as exc:
            blame("the verifier", exc, lambda: self._verify(self.sandbox.starting.unpatched(), evidence_wanted,
                                                            limits, canary=True))

    def _verify(self, copy: VerifierCopy, evidence_wanted: bool, limits: ExecLimits | None = None, *,
                canary: bool = False) -> tuple[ExecOutcome, Channel]:
        """The task's reference tests and verify command on ``copy``, in a
        fresh container (one started early, when there is one), under
        ``limits`` (default: the policy's, with no run deadline), with the
        trusted reporter when the verifier is pytest; the first submit of a
        run first collects the required tests from the starting copy there
        (never the canary's)."""
        limits = limits or self.limits()
        pre_pass = not canary and self._needs_pre_pass(evidence_wanted)
        # ExportRefused here leaves an early container for the next submit.
        archive = self.sandbox.starting.archive_for(copy)
        early = None if canary else self._take_early()
        if early is not None and pre_pass and not self._early_collects:  # not started for a pre-pass
            early[0].close()
            early = None
        if early is not None:  # started (and pre-passed) while the agent worked: start_early
            verifier, required = early
            if pre_pass:
                self._required_known, self._required = True, required
            with verifier:
                self.sandbox.starting.refill(verifier, copy, self.copy_changed_only)
                return self._verify_in(verifier, evidence_wanted, limits)
        first = self.sandbox.starting.view_archive(copy) if pre_pass else None
        with self.sandbox.fresh(first or archive, "verify") as verifier:
            if first is not None:
                self._required_known = True
                self._required = self._collect_required(verifier, self.verifier_command or "", limits,
                                                        self.cancel)
                self.sandbox.starting.refill(verifier, copy, self.copy_changed_only)
            return self._verify_in(verifier, evidence_wanted, limits)

    def _verify_in(self, verifier: Sandbox, evidence_wanted: bool, limits: ExecLimits) -> tuple[ExecOutcome, Channel]:
        """The reference tests and the verify command in ``verifier``, which holds the copy."""
        env = reporter_env(_RUN_CHANNEL, "run") if evidence_wanted else None
        outcome = self._apply_verifier_patch(verifier, limits, self.cancel) or verifier.bash(
            self.verifier_command or "", limits, cancel=self.cancel, env=env)
        channel = _read_channel(verifier, _RUN_CHANNEL) if env else Channel()
        return outcome, channel

    def _apply_verifier_patch(self, verifier: Sandbox, limits: ExecLimits,
                              cancel: threading.Event | None) -> ExecOutcome | None:
        """Apply the task's reference tests after the model's patch, as
        SWE-bench's harness does; the outcome only when they do not apply
        (then the verifier does not run, and the submit fails)."""
        if not self.verifier_patch:
            return None
        outcome = verifier.exec(["/usr/bin/git", "-c", "core.attributesFile=/dev/null", "apply",
                                 "--whitespace=nowarn", "-"], limits,
                                stdin=self.verifier_patch.encode("utf-8", "surrogateescape"), cancel=cancel)
        if outcome.exit_code == 0 and not outcome.timed_out:
            return None
        return outcome.model_copy(update={"exit_code": outcome.exit_code or 1})

    def flagged(self, patch: Patch) -> Patch:
        """``patch`` with the flags its verification under this policy gives
        (protected, hidden and shadowing paths), for a run that ends without
        a passing submit."""
        return self._verifier_copy(patch)[0]

    def _verifier_copy(self, patch: Patch) -> tuple[Patch, VerifierCopy]:
        copy = self.sandbox.starting.verifier_copy(patch, self.policy, self.sandbox.installed_modules)
        # A path already flagged whatever the policy (CI configuration) keeps
        # that reason, so its [apply] grant is the one that counts; the copy
        # adds what became of it in verification.
        details = {f.path: f.detail for f in copy.flags}
        known = {f.path for f in patch.flagged}
        flags = [f.model_copy(update={"detail": details.get(f.path, f.detail)}) for f in patch.flagged]
        flags += [f for f in copy.flags if f.path not in known]
        return patch.model_copy(update={"flagged": tuple(sorted(flags, key=lambda f: f.path))}), copy

    def file_op(self, args: FileToolArgs, request: dict[str, object], *,
                time_left_s: float | None = None) -> ToolResult:
        """One round trip: the executor resolves the path in the container and
        holds it open, the ACL judges the resolved path here (a link
        ``docs/s -> ../secrets`` or ``g -> .git`` is judged as its target), and
        the op runs on exactly what was resolved, or not at all."""
        name = args.name
        judged: dict[str, object] = {}

        def judge(resolved: str) -> bool:
            decision = decide(name, args.model_copy(update={"path": resolved}), self.policy)
            judged.update(path=resolved, decision=decision)
            return decision.effect is not Effect.DENY

        request = request | {"max_bytes": self.policy.resources.read_cap_bytes}
        outcome = self.sandbox.file_op(request, judge, self.limits(time_left_s=time_left_s), cancel=self.cancel)
        decision = judged.get("decision")
        resolved = judged.get("path")
        rule = decision.rule if isinstance(decision, Decision) else None
        reply = outcome.reply
        if reply is not None and reply.get("denied") and isinstance(decision, Decision):
            return ToolResult(tool=name, ok=False, exit_code=None, duration_s=outcome.duration_s,
                              resolved_path=str(resolved), resolved_rule=rule,
                              observation=f"denied by policy ({rule}) on the resolved path: "
                                          f"{args.path} resolves to {resolved}; {decision.reason}")
        if name == "list_files" and reply is not None and reply.get("ok"):
            reply = listing_without_denied(reply, str(resolved), self.policy)
        return file_op_result(args, outcome, reply).model_copy(
            update={"resolved_path": resolved if isinstance(resolved, str) else None, "resolved_rule": rule})


def _read_channel(verifier: Sandbox, path: str) -> Channel:
    """The reporter's channel, read after the command (every process of it
    is gone by then) under the channel's cap."""
    data, truncated = verifier.read_file(path, MAX_CHANNEL_BYTES)
    return parse_channel(data, truncated=truncated)


def _with_suspect(sandbox: Sandbox, result: ToolResult) -> ToolResult:
    """A passing submit with the reasons its patch is SUSPECT, if any
    (``sandbox.patch_scan``: what the patch added to the machinery of
    verification, what the verifier's copy left out)."""
    if not result.verifier_passed or result.patch is None:
        return result
    return result.model_copy(update={"suspect": suspect_reasons(sandbox.git, sandbox.base, result.patch)})
