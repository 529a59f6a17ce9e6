"""Every exit code of the ``escrow`` command, one meaning each.

Errors carry their code as ``exit_code`` (``orchestrator.errors`` draws the
tree); commands that report a finding rather than fail exit with these
names directly. docs/ARCHITECTURE.md prints this table; a test checks that
the two agree and that no code has two meanings.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # success; replay identical; a run's verdict PASS
    FINDING = 1  # a negative finding: a verdict other than PASS, a divergence or drift, a broken chain, a failed check
    USAGE = 2  # bad arguments, settings, price file or request; an unusable recording
    STORE_MISSING = 3  # no store at that location, or it stopped answering in the middle of a batch
    STORE_DAMAGED = 4  # not a store, or a damaged one (corrupt page, wrong-typed cell, foreign schema)
    SCHEMA_MISMATCH = 5  # the store's schema is too new, or too old for a read-only command
    RUN_NOT_FOUND = 6  # no run (or batch) matches the id or prefix, or the prefix is ambiguous
    RECORDING_INCONSISTENT = 7  # a write that would make the record inconsistent
    NOTHING_TO_REPORT = 8  # nothing to report or export
    REPLAY_RECORDING_ENDS = 9  # replay identical up to where a killed run's recording ends
    REPLAY_NOISE_ONLY = 10  # re-execution: only volatile fields differ
    NOT_REPLAYABLE = 11  # an imported run: its requests were not built by Escrow's loop
    SOURCE_UNREADABLE = 12  # import: truncated, corrupt, or not the structure its format promises
    SOURCE_FORMAT_MISMATCH = 13  # import: not in the format asked for, or in none Escrow reads
    SOURCE_VERSION_UNSUPPORTED = 14  # import: a schema version Escrow does not read
    SOURCE_TOO_LARGE = 15  # import: over a size cap (file, member, compression ratio)
    POLICY_INVALID = 65  # EX_DATAERR: a policy file that does not validate
    IMAGE_MISSING = 67  # the sandbox image is not built
    RUNTIME_MISSING = 68  # the sandbox runtime asked for (e.g. runsc) is not registered with dockerd
    DAEMON_UNAVAILABLE = 69  # EX_UNAVAILABLE: no Docker daemon
    IMAGE_BUILD_FAILED = 70  # the sandbox image build failed
    SANDBOX_FAILED = 71  # EX_OSERR: the daemon failed to run a command, or the workspace copy or patch failed
    APPLY_REFUSED = 77  # EX_NOPERM: --apply refused by the policy's [apply] section
    INTERRUPTED = 130  # Ctrl-C


def markdown_table() -> str:
    """The table docs/ARCHITECTURE.md carries, generated from the comments above."""
    import inspect

    lines = ["| code | name | meaning |", "|---|---|---|"]
    source = inspect.getsource(ExitCode)
    for code in ExitCode:
        meaning = source.split(f"{code.name} = {code.value}  # ", 1)[1].split("\n", 1)[0]
        lines.append(f"| {code.value} | `{code.name}` | {meaning} |")
    return "\n".join(lines)
