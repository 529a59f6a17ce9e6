"""Recording real runs for the replay tests and bench: the real turn loop and
ModelClient against the fault-injection server over loopback, recorded into a
real SQLite store, with either the Docker sandbox (``escrow run``'s own
composition root) or ``MemoryTools``, a deterministic in-memory workspace
that answers the same tools with the same argument models and ACL."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from orchestrator.adapters.fault_server import FaultServer, Reply, ScriptedToolCall
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.context import TiktokenCounter
from orchestrator.contract import Sampling, ToolSpec
from orchestrator.perimeter import acl_of
from orchestrator.ports import ToolOutcome
from orchestrator.runspec import RunSpec, build_agent
from orchestrator.settings import Settings
from orchestrator.toolset import TOOLS, tool_specs
from policies import Policy, default_policy
from store import Recorder, RunJournal, Store

EXAMPLE_REPO = Path(__file__).resolve().parents[2] / "examples" / "calculator"
FIXED_MEAN = "return sum(values) / len(values)"
BROKEN_MEAN = "return sum(values) / (len(values) + 1)"


def call(name: str, **args: object) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=json.dumps(args))


def reply(*calls: ScriptedToolCall, text: str = "") -> Reply:
    return Reply(text=text, tool_calls=calls)


class MemoryTools:
    """The Tools port over a dict of files: deterministic and Docker-free."""

    def __init__(self, files: Mapping[str, str], policy: Policy, verifier_needle: str = FIXED_MEAN) -> None:
        self.files = dict(files)
        self.policy = policy
        self.needle = verifier_needle

    def specs(self) -> tuple[ToolSpec, ...]:
        return tool_specs(self.policy.tools.allowed)

    def arg_models(self) -> Mapping[str, type[BaseModel]]:
        return TOOLS

    def execute(self, name: str, args: BaseModel, *, time_left_s: float | None = None) -> ToolOutcome:
        a = args.model_dump()
        if name == "read_file":
            text = self.files.get(a["path"])
            return ToolOutcome(
                observation=text if text is not None else f"no such file: {a['path']}", ok=text is not None
            )
        if name == "write_file":
            self.files[a["path"]] = a["content"]
            return ToolOutcome(observation=f"wrote {len(a['content'])} bytes to {a['path']}", ok=True)
        if name == "edit_file":
            text = self.files.get(a["path"], "")
            if a["old"] not in text:
                return ToolOutcome(observation="search text not found", ok=False)
            self.files[a["path"]] = text.replace(a["old"], a["new"], 1)
            return ToolOutcome(observation=f"edited {a['path']}", ok=True)
        if name == "list_files":
            return ToolOutcome(observation="\n".join(sorted(self.files)), ok=True)
        if name == "submit":
            passed = any(self.needle in t for t in self.files.values())
            return ToolOutcome(observation="verifier passed" if passed else "verifier failed: 1 failed", ok=passed,
                               exit_code=0 if passed else 1, verifier_passed=passed)
        command = a["command"]
        return ToolOutcome(observation=f"$ {command}\n{len(command)} characters, exit 0", ok=True, exit_code=0)


def memory_spec(policy: Policy, model: str, **overrides: object) -> RunSpec:
    fields: dict[str, object] = dict(
        task="fix mean() in calc.py", verifier="python3 -m pytest -q", tool_specs=tool_specs(policy.tools.allowed),
        model=model, s_max=32_768, k_max=256, tokenizer="tiktoken:cl100k_base", limits=policy.limits,
        sampling=Sampling(temperature=0.0, seed=7),
    )
    fields.update(overrides)
    return RunSpec(**fields)  # type: ignore[arg-type]


class WordCounter:
    """A tokenizer that is not tiktoken (as a server's is): its counts are
    recorded as token_counts events and served back by replay."""

    name = "words"

    def count(self, text: str) -> int:
        return len(text.split()) + 1


def record_memory_run(store: Store, server: FaultServer, steps: list, *, policy: Policy | None = None,
                      files: Mapping[str, str] | None = None, counter: object | None = None,
                      **spec_overrides: object) -> str:
    """Play ``steps`` on the fault server through the real loop; returns the run id."""
    policy = policy or default_policy()
    spec = memory_spec(policy, server.model, **spec_overrides)
    server.script(steps)
    recorder = Recorder(store)
    run_id = recorder.start_run(
        task=spec.task, repo="/memory/calculator", model=spec.model, policy=policy.model_dump(mode="json"),
        config={"spec": spec.model_dump(mode="json"), "model_url": server.base_url, "sandbox_image": None},
    )
    workspace = files if files is not None else {p.name: p.read_text() for p in EXAMPLE_REPO.glob("*.py")}
    with ModelClient(server.base_url) as client:
        agent = build_agent(spec, counter=counter or TiktokenCounter("cl100k_base"), model=client,  # type: ignore[arg-type]
                            tools=MemoryTools(workspace, policy), acl=acl_of(policy),
                            journal=RunJournal(recorder, run_id))
        agent.run()
    return run_id


def fixing_steps(extra_reads: int = 0) -> list:
    """A trajectory that reads, fails the verifier, edits, and passes."""
    steps = [reply(call("list_files", path="."), text="Let me look.")]
    steps += [reply(call("read_file", path="calc.py")) for _ in range(extra_reads)]
    steps += [
        reply(call("read_file", path="calc.py"), call("bash", command="python3 -m pytest -q")),
        reply(call("submit")),
        reply(call("edit_file", path="calc.py", old=BROKEN_MEAN, new=FIXED_MEAN)),
        reply(call("submit")),
    ]
    return steps


def copy_example_repo(dest: Path) -> Path:
    shutil.copytree(EXAMPLE_REPO, dest)
    return dest


def docker_settings(tmp: Path, server: FaultServer, image: str, **overrides: object) -> Settings:
    values: dict[str, object] = dict(
        home=tmp / "home", db_url=f"sqlite:///{tmp / 'escrow.db'}", model_url=server.base_url, model=server.model,
        sandbox_image=image, tokenizer="cl100k_base", context_window=32_768, max_output_tokens=256, seed=7,
    )
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def _limited(max_turns: int) -> Policy:
    policy = default_policy()
    return policy.model_copy(update={"limits": policy.limits.model_copy(update={"max_turns": max_turns})})


def record_varied_runs(store: Store, server: FaultServer) -> dict[str, str]:
    """Runs that take every road through the loop: pass, truncation and
    refusal, perimeter rejections and a turn limit, a stream rejection and a
    retried 503, the text protocol, a non-tiktoken tokenizer."""
    from orchestrator.adapters.fault_server import Fault

    runs = {"fixing": record_memory_run(store, server, fixing_steps(extra_reads=1))}
    runs["truncated_then_refused"] = record_memory_run(
        store, server, [Fault.truncated(), reply(call("read_file", path="calc.py")), Fault.refusal()])
    runs["perimeter_and_turn_limit"] = record_memory_run(store, server, [
        Reply(tool_calls=(ScriptedToolCall(name="read_file", arguments='{"path": "calc.py"'),)),
        reply(call("read_file")),
        reply(call("write_file", path=".git/config", content="x"), call("read_file", path="test_calc.py")),
        reply(call("bash", command="ls -la")),
        reply(call("list_files")),
    ], policy=_limited(4))
    runs["rejected_and_retried"] = record_memory_run(store, server, [
        Fault.invalid_tool_arguments(), Fault.http(503, retry_after=0), reply(call("list_files")), reply(text="done"),
        reply(call("submit", summary="nothing")),
    ], policy=_limited(5))
    runs["text_protocol"] = record_memory_run(store, server, [
        Reply(text='Reading.\n<tool name="read_file">{"path": "calc.py"}</tool>'),
        Reply(text=f"calc.py\n<<<<<<< SEARCH\n    {BROKEN_MEAN}\n=======\n    {FIXED_MEAN}\n>>>>>>> REPLACE"),
        Reply(text='<tool name="submit">{}</tool>'),
    ], protocol="text")
    runs["word_tokenizer"] = record_memory_run(store, server, fixing_steps(), counter=WordCounter(), tokenizer="words")
    return runs
