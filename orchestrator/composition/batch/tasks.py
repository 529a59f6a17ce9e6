"""Task files: JSONL (or Parquet) rows in the SWE-bench form or the plain
Escrow form, parsed into frozen ``BatchTask`` values.

Parsing is pure and total: a malformed row becomes a ``TaskRowError`` naming its
line, and the rows around it still parse. Repeated ids refuse the whole file,
because a batch keys its runs by task id.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from orchestrator.composition.batch.errors import TaskFileError, TaskRowError
from orchestrator.contract import Frozen
from policies.model import VerifyGrants


class TaskOverrides(Frozen):
    """Per-task changes to the batch's settings."""

    policy: str | None = None
    max_turns: int | None = Field(default=None, ge=1)
    budget_usd: float | None = Field(default=None, ge=0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    task_timeout_s: float | None = Field(default=None, gt=0)
    # [verify] hidden globs for this task: removed from the model's copy, given only to the verifier.
    hidden: tuple[str, ...] | None = None

    @field_validator("hidden")
    @classmethod
    def _relative(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else VerifyGrants(hidden=value).hidden


class SweBenchRow(Frozen, extra="ignore"):
    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    base_commit: str = Field(pattern=r"^[0-9a-f]{7,40}$")
    problem_statement: str = Field(min_length=1)
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...] = ()
    image_name: str | None = None
    # The reference tests: applied only in the verifier's container, after the model's patch.
    test_patch: str | None = None

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        # SWE-bench ships these as JSON text inside the row.
        return json.loads(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _some_test(self) -> "SweBenchRow":
        if not self.FAIL_TO_PASS:
            raise ValueError("FAIL_TO_PASS is empty: nothing would show the task solved")
        return self


class EscrowRow(TaskOverrides, extra="forbid"):
    id: str = Field(min_length=1)
    repo: str = Field(min_length=1, description="A local path or a git URL.")
    commit: str | None = None
    task: str = Field(min_length=1)
    verify: str = Field(min_length=1)


class BatchTask(Frozen):
    """One task of a batch, whatever form its row had."""

    id: str
    line: int
    repo: str
    commit: str | None
    task: str
    verify: str
    form: str
    image_name: str | None = None
    verify_patch: str | None = None  # applied in the verifier's container only (SWE-bench's test_patch)
    required_tests: tuple[str, ...] = ()  # SWE-bench's FAIL_TO_PASS and PASS_TO_PASS: each must be seen passing
    overrides: TaskOverrides = TaskOverrides()


class TaskFile(Frozen):
    path: str
    tasks: tuple[BatchTask, ...]
    errors: tuple[str, ...]

    def task(self, task_id: str) -> BatchTask:
        return next(t for t in self.tasks if t.id == task_id)


def swebench_verifier(row: SweBenchRow) -> str:
    ids = " ".join(shlex.quote(test) for test in (*row.FAIL_TO_PASS, *row.PASS_TO_PASS))
    return f"python3 -m pytest -q -p no:cacheprovider {ids}"


def parse_row(raw: Any, line: int) -> BatchTask:
    if not isinstance(raw, dict):
        raise TaskRowError(f"a row must be a JSON object, not {type(raw).__name__}", line=line)
    try:
        if "instance_id" in raw:
            swe = SweBenchRow.model_validate(raw)
            return BatchTask(id=swe.instance_id, line=line, repo=swe.repo, commit=swe.base_commit,
                             task=swe.problem_statement, verify=swebench_verifier(swe), form="swebench",
                             image_name=swe.image_name, verify_patch=swe.test_patch or None,
                             required_tests=(*swe.FAIL_TO_PASS, *swe.PASS_TO_PASS))
        if "id" in raw:
            row = EscrowRow.model_validate(raw)
            overrides = TaskOverrides.model_validate(row.model_dump(include=set(TaskOverrides.model_fields)))
            return BatchTask(id=row.id, line=line, repo=row.repo, commit=row.commit, task=row.task,
                             verify=row.verify, form="escrow", overrides=overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "row"
        raise TaskRowError(f"{where}: {first['msg']} ({exc.error_count()} problem(s))", line=line) from None
    raise TaskRowError("neither an 'instance_id' (SWE-bench form) nor an 'id' (Escrow form)", line=line)


def _raw_rows(path: Path) -> list[tuple[int, Any, str | None]]:
    """(line, value, error) per row; Parquet rows are numbered from 1 like lines."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no type stubs
        except ImportError:
            raise TaskFileError("reading Parquet needs pyarrow (pip install 'escrow[batch]')") from None
        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises several unrelated types for a bad file
            raise TaskFileError(f"{path}: not a readable Parquet file ({exc})", path=str(path)) from None
        return [(i, row, None) for i, row in enumerate(table.to_pylist(), start=1)]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"cannot read task file {path}: {exc}", path=str(path)) from None
    rows: list[tuple[int, Any, str | None]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line), None))
        except json.JSONDecodeError as exc:
            rows.append((number, None, f"line {number}: not JSON ({exc.msg} at column {exc.colno})"))
    return rows


def load_task_file(path: Path) -> TaskFile:
    """Every well-formed task and one message per malformed row; raises on repeated ids."""
    tasks: list[BatchTask] = []
    errors: list[str] = []
    for line, raw, error in _raw_rows(path):
        if error is not None:
            errors.append(error)
            continue
        try:
            tasks.append(parse_row(raw, line))
        except TaskRowError as exc:
            errors.append(exc.message)
    seen: dict[str, int] = {}
    for task in tasks:
        if task.id in seen:
            raise TaskFileError(f"{path}: task id {task.id!r} appears on line {seen[task.id]} and line {task.line}",
                                task_id=task.id)
        seen[task.id] = task.line
    if not tasks and not errors:
        raise TaskFileError(f"{path}: no tasks", path=str(path))
    return TaskFile(path=str(path), tasks=tuple(tasks), errors=tuple(errors))
