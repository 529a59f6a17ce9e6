"""Typed errors. Every error carries the context a caller needs to act on it,
and the exit code the CLI ends with (one table: ``orchestrator.exit_codes``).

The one tree (exit code in brackets)::

    EscrowError [USAGE 2]
    ├── ConfigError [2]              bad settings, policy or price file
    │   ├── PolicyError [65]         policies/loading.py: a policy file that does not validate
    │   ├── PriceTableError [2]      policies/price_table.py: a price file or price edit
    │   └── ModelUnreachable [2]     the model URL is not http(s), or nothing answers there
    ├── ContractError [2]            a request violates its own contract (e.g. S + K_max > S_max)
    │   ├── ReservedWireKey [2]      Sampling.extra names a key Escrow sets itself
    │   └── GrammarRefused [2]       orchestrator/grammar.py: no grammar can be written for the tools
    ├── TokenizerError [2]           no usable tokenizer
    │   ├── TemplateNotPrefixPreserving [2]  a chat template --token-exact cannot extend by ids
    │   ├── TokenExactUnsupported [2]  an engine that takes no prompt as ids (--token-exact)
    │   └── TeacherRefused [2]       escrow score: a teacher that cannot score, or another vocabulary
    │       └── TeacherAnswerInvalid [2]  a teacher's answer that does not score the ids sent
    ├── BudgetExhausted [2]          a run limit was reached (ends a run as a verdict, not an exit)
    ├── QuarantinedPayloadError [2]  orchestrator/escrow.py: a non-COMPLETED envelope asked to leave
    ├── IllegalTransition [2]        orchestrator/candidate.py: a move the escrow's states forbid
    ├── SSEError [2]                 orchestrator/adapters/model_client/sse.py: a byte stream that is not SSE
    ├── FaultServerError [2]         orchestrator/adapters/fault_server: the test server did not start or stop
    ├── LoopAbort [2]                ends Agent.run itself (a replay's divergence)
    ├── ReportError [8]              a report or export cannot be produced
    │   ├── NothingToReport [8]
    │   ├── ExportError [8]          store/read/reports/export.py
    │   └── RolloutRefused [8]       orchestrator/rollout.py: no exact ids for a training sequence
    ├── ReplayError [2]              orchestrator/replay/errors.py: an unusable recording
    │   ├── RecordingUnusable, ChainRefused, WorkspaceGone, WorkspaceChanged [2]
    │   └── Divergence [1]           the replay differs from the recording
    ├── SourceError [12]             orchestrator/interop/errors.py: an import source
    │   ├── UnreadableSource [12], FormatMismatch [13]
    │   └── UnsupportedVersion [14], SourceTooLarge [15]
    ├── NotReplayable [11]           an imported run asked to replay
    ├── RecordedBytesError [4]       orchestrator/canonical.py: a record's exact bytes do not decode
    ├── StoreError [3]               store/errors.py
    │   ├── StoreNotFound [3]
    │   ├── NotAStore [4], StoreDamaged [4]
    │   │   ├── RollupMismatch [4]   stored per-run totals that are stale or altered
    │   │   ├── TtftRollupMismatch [4] TTFT rollups that do not add up to their runs' totals
    │   │   ├── UncheckedRows [4]    an unfinished run's rows, summed by a report, whose chain fails
    │   │   └── BatchAttributionMismatch [4]  batch tables that disagree with a run's chain
    │   ├── SchemaTooNew, SchemaTooOld [5]
    │   ├── RunNotFound [6], RecordingError [7]
    │   │   └── UnknownBatch [6]     cli/view/batch_pages.py: no batch with that id (a 404 page)
    │   ├── StoreLost [3]            orchestrator/composition/batch/errors.py: the store went away during a batch
    │   └── ChainBroken [1], BlobMissing [1]
    ├── SandboxError [71]            sandbox/errors.py
    │   ├── DaemonUnavailable [69], ImageMissing [67], RuntimeMissing [68], ImageBuildError [70]
    │   ├── SandboxStartTimeout [71] orchestrator/composition/batch/start_deadline.py: past --start-timeout
    │   ├── ExecError [71]: ExecutorBroken [71] (the sandbox's executor died or broke its protocol)
    │   ├── InfraFailure [71]        a failed step whose canary on the starting copy failed too
    │   └── WorkspaceError [71]: ExportRefused, GitTimeout [71], ApplyRefused [77]
    │       └── WorkspaceFault [71]  (an ExportRefused) the step failed on this workspace alone
    ├── TaskFileError, TaskRowError, RepoError, RayUnavailable [2], BatchNotFound [6]
    │                                orchestrator/composition/batch/errors.py
    └── BatchInterrupted [130]       orchestrator/composition/batch/errors.py: Ctrl-C stopped a batch

Model-call failures are *not* exceptions: the client turns every outcome into an
Envelope with a Status, so that the loop routes on data rather than on ``except``.
"""

from __future__ import annotations

from typing import Any

from orchestrator.exit_codes import ExitCode


class EscrowError(Exception):
    """Base of every error Escrow raises on purpose. ``exit_code`` is what the
    CLI exits with when this error reaches it."""

    exit_code: int = ExitCode.USAGE

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __str__(self) -> str:
        return self.message


class LoopAbort(EscrowError):
    """Ends ``Agent.run`` itself instead of ending the run with a verdict: the
    caller handles it (a replay's divergence). Every other exception inside
    the loop is an INFRA_ERROR verdict."""


class ConfigError(EscrowError):
    """A configuration, policy or price file is invalid."""


class ModelUnreachable(ConfigError):
    """The model URL is not an http(s) URL, or nothing accepts a connection
    there: found before a sandbox starts or a run is recorded."""


class ContractError(EscrowError):
    """A request cannot be honoured as specified."""


class TokenizerError(EscrowError):
    """No tokenizer could count tokens for this model."""


class TemplateNotPrefixPreserving(TokenizerError):
    """The engine's chat template renders a longer conversation as something
    the shorter one's rendering does not begin, or puts text of its own
    before an answer: ``--token-exact`` cannot extend the last prompt's ids
    by what the template adds. ``context`` has both renderings' difference."""


class TokenExactUnsupported(TokenizerError):
    """``--token-exact`` against an engine that takes no prompt as token ids."""


class TeacherRefused(TokenizerError):
    """``escrow score``: an engine that gives no logprobs over a prompt, or a
    teacher whose tokenizer is not the student's; nothing is scored."""


class TeacherAnswerInvalid(TeacherRefused):
    """A teacher's answer for one sequence that is not one finite logprob
    <= 0 per sampled id; ``context`` names the call and what was wrong."""


class BudgetExhausted(EscrowError):
    """A run-level limit was reached; ``limit`` names which one."""

    def __init__(self, message: str, *, limit: str, **context: Any) -> None:
        super().__init__(message, limit=limit, **context)
        self.limit = limit


class ReportError(EscrowError):
    """A report or export cannot be produced as asked."""

    exit_code = ExitCode.NOTHING_TO_REPORT


class NothingToReport(ReportError):
    """The store (or the asked window) holds no runs to report on or export."""
