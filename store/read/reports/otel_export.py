"""Recorded runs as OpenTelemetry GenAI spans, built with the OpenTelemetry
SDK (the optional ``otel`` extra) and written as OTLP JSON or sent to an
OTLP/HTTP endpoint.

One ``invoke_agent`` span per run; under it one ``chat`` span per answered
model call (usage, finish reasons, the envelope status) and one
``execute_tool`` span per tool execution (the ACL decision and rule). An
imported run's run-level figures that no call gives (a SWE-agent
``model_stats``) are on its ``invoke_agent`` span, marked
``escrow.usage.basis = run_level``. Span
times are the recorded ones. Attributes follow the GenAI semantic
conventions; the OpenInference twins (``openinference.span.kind``,
``llm.token_count.*``) are added so Phoenix shows kinds and token counts.
Figures recorded as absent are not set.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.trajectory import CallView, ToolExecutionView, Trajectory
from store.read.reports.export import run_reward
from store.read.reports.run_report import counted_of

NS = 1_000_000_000
SERVICE = "escrow"
FAILED = {"TRANSPORT_FAILURE", "REJECTED", "CANCELED", "FAULTED", "REFUSED"}


def reward_attributes(trajectory: Trajectory) -> dict[str, Any]:
    """``run_reward`` as span attributes: an absent reward is left out (an
    attribute has no null), a SUSPECT run's reasons are a list of strings."""
    fields = run_reward(trajectory)
    out: dict[str, Any] = {"escrow.run.suspect": bool(fields["suspect"])}
    if fields["reward"] is not None:
        out["escrow.run.reward"] = fields["reward"]
    if fields.get("suspect_reasons"):
        out["escrow.run.suspect_reasons"] = [str(r) for r in fields["suspect_reasons"]]
    return out


def sdk() -> Any:
    try:
        from opentelemetry.sdk import trace as sdk_trace
    except ImportError:
        raise ConfigError("the otel export needs the OpenTelemetry SDK: pip install 'escrow[otel]'") from None
    return sdk_trace


def ns(seconds: float) -> int:
    return int(seconds * NS)


def call_attributes(call: CallView) -> dict[str, Any]:
    r = call.response
    assert r is not None
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": call.request_model,
        "escrow.envelope.status": r.status,
        "escrow.call.id": call.id,
        "escrow.turn": call.turn if call.turn is not None else -1,
        "openinference.span.kind": "LLM",
        "llm.model_name": r.response_model or call.request_model,
        "escrow.usage.input_tokens_source": r.input_tokens_source,
        "escrow.usage.output_tokens_source": r.output_tokens_source,
        "escrow.usage.cached_input_tokens_source": r.cached_input_tokens_source,
    }
    if r.response_model:
        attrs["gen_ai.response.model"] = r.response_model
    if r.finish_reasons:
        attrs["gen_ai.response.finish_reasons"] = tuple(json.loads(r.finish_reasons))
    if r.input_tokens_source != "absent":
        attrs["gen_ai.usage.input_tokens"] = attrs["llm.token_count.prompt"] = r.input_tokens
    if r.output_tokens_source != "absent":
        attrs["gen_ai.usage.output_tokens"] = attrs["llm.token_count.completion"] = r.output_tokens
    if r.cached_input_tokens_source != "absent":
        attrs["gen_ai.usage.cache_read.input_tokens"] = attrs["llm.token_count.prompt_details.cache_read"] = (
            r.cached_input_tokens
        )
    if "llm.token_count.prompt" in attrs and "llm.token_count.completion" in attrs:
        attrs["llm.token_count.total"] = attrs["llm.token_count.prompt"] + attrs["llm.token_count.completion"]
    if r.error_type:
        attrs["error.type"] = r.error_type
    if r.cost_usd is not None:
        attrs["escrow.cost_usd"] = r.cost_usd
    return attrs


def tool_attributes(execution: ToolExecutionView, tool_call_id: str | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": execution.tool_name,
        "gen_ai.tool.type": "function",
        "escrow.acl.decision": execution.decision or "absent",
        "openinference.span.kind": "TOOL",
        "tool.name": execution.tool_name,
    }
    if tool_call_id:
        attrs["gen_ai.tool.call.id"] = tool_call_id
    if execution.rule:
        attrs["escrow.acl.rule"] = execution.rule
    if execution.exit_code is not None:
        attrs["escrow.tool.exit_code"] = execution.exit_code
    return attrs


RUN_LEVEL_ATTRIBUTES = (
    ("prompt_tokens", ("gen_ai.usage.input_tokens", "llm.token_count.prompt")),
    ("completion_tokens", ("gen_ai.usage.output_tokens", "llm.token_count.completion")),
    ("cached_tokens", ("gen_ai.usage.cache_read.input_tokens", "llm.token_count.prompt_details.cache_read")),
    ("cost_usd", ("escrow.cost_usd",)),
)


def run_level_attributes(trajectory: Trajectory) -> dict[str, Any]:
    """The agent span's share of the run's figures: an imported run's
    run-level totals that no call span carries (so nothing is counted twice)."""
    counted = counted_of(trajectory)
    if not counted:
        return {}
    attrs: dict[str, Any] = {"escrow.usage.basis": "run_level"}
    for key, names in RUN_LEVEL_ATTRIBUTES:
        if counted.get(key) is not None:
            attrs.update(dict.fromkeys(names, counted[key]))
    return attrs


def run_spans(trajectory: Trajectory, tracer: Any) -> int:
    """Emit one run's spans through ``tracer``; returns how many."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    run = trajectory.run
    agent = run.config.get("import", {}).get("format") if run.mode == "import" else SERVICE
    calls = sorted((c for t in trajectory.turns for c in t.calls if c.response is not None), key=lambda c: c.seq)
    executions = [
        (e, {c.id: c.tool_call_id for c in t.candidates}.get(e.candidate_id))
        for t in trajectory.turns
        for e in t.tool_executions
    ]
    ends = [c.created_at + c.response.total_s for c in calls if c.response] + [
        e.at + (e.duration_s or 0.0) for e, _ in executions
    ]
    end = max([run.finished_at or run.created_at, *ends])
    # An imported run's calls happened before the import: the agent span covers them.
    start = min(
        [run.created_at, *(c.created_at for c in calls), *(e.at - (e.duration_s or 0.0) for e, _ in executions)]
    )
    root = tracer.start_span(
        f"invoke_agent {agent}",
        start_time=ns(start),
        kind=trace.SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": str(agent),
            "gen_ai.agent.id": run.id,
            "gen_ai.conversation.id": run.id,
            "gen_ai.request.model": run.request_model,
            "escrow.run.mode": run.mode,
            "escrow.run.status": run.status,
            "escrow.run.verdict": run.verdict or "",
            **reward_attributes(trajectory),
            "openinference.span.kind": "AGENT",
            **run_level_attributes(trajectory),
        },
    )
    context = trace.set_span_in_context(root)
    for call in calls:
        r = call.response
        assert r is not None
        span = tracer.start_span(
            f"chat {call.request_model}",
            context=context,
            start_time=ns(call.created_at),
            kind=trace.SpanKind.CLIENT,
            attributes=call_attributes(call),
        )
        span.set_status(Status(StatusCode.ERROR, r.status) if r.status in FAILED else Status(StatusCode.OK))
        span.end(end_time=ns(call.created_at + r.total_s))
    for execution, tool_call_id in executions:
        start = execution.at - (execution.duration_s or 0.0)
        span = tracer.start_span(
            f"execute_tool {execution.tool_name}",
            context=context,
            start_time=ns(start),
            kind=trace.SpanKind.INTERNAL,
            attributes=tool_attributes(execution, tool_call_id),
        )
        if execution.ok is False or execution.decision == "deny":
            span.set_status(Status(StatusCode.ERROR, execution.decision or "failed"))
        span.end(end_time=ns(execution.at))
    root.set_status(Status(StatusCode.OK))
    root.end(end_time=ns(end))
    return 1 + len(calls) + len(executions)


def collect(trajectories: Iterable[Trajectory], project: str) -> Sequence[Any]:
    """The finished SDK spans of the runs, in memory."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    sdk_trace = sdk()
    memory = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider(
        resource=Resource.create({"service.name": SERVICE, "openinference.project.name": project})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("escrow.export")
    for trajectory in trajectories:
        run_spans(trajectory, tracer)
    provider.shutdown()
    return memory.get_finished_spans()


def otlp_json(spans: Sequence[Any]) -> dict[str, Any]:
    """OTLP/JSON of the spans: the SDK's protobuf encoding in the JSON
    mapping, with trace and span ids as hex as OTLP/JSON requires."""
    from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]  # protobuf ships no stubs
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    document = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
    return document


def send(spans: Sequence[Any], endpoint: str, timeout_s: float = 30.0) -> None:
    """POST the spans to an OTLP/HTTP traces endpoint (e.g. http://host:4318/v1/traces)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s)
    try:
        result = exporter.export(spans)
    finally:
        exporter.shutdown()
    if result is not SpanExportResult.SUCCESS:
        raise ConfigError(f"the OTLP endpoint {endpoint} did not accept the spans", endpoint=endpoint)
