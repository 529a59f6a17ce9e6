"""What ``escrow score`` waits on besides the teacher's prefill: the engine
endpoints probed at once, the vocabulary probes ``--parallel`` at a time
(a refusal still naming the first probe that differs), the calls of several
runs in flight together, and the figures printed kept as rows are read and
written (equal to ``report RUN --json``). Served over loopback HTTP: a
plain threading server that holds each request until a number of them are
in flight, and the fault server posing as vLLM's teacher."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer, Reply
from orchestrator.adapters.fault_server.scenario import Hangup
from orchestrator.adapters.model_client.provenance import PROBES as ENDPOINTS
from orchestrator.adapters.model_client.provenance import probe
from orchestrator.adapters.model_client.teacher_scoring import PROBES, TeacherClient, check_vocabulary
from orchestrator.errors import TeacherRefused
from tests.tokens.conftest import growing, record


class InFlight:
    """Counts requests in flight; each is held until ``together`` are (or ``hold_s`` passed)."""

    def __init__(self, together: int, hold_s: float = 1.0) -> None:
        self.together, self.hold_s = together, hold_s
        self.now = self.most = 0
        self.changed = threading.Condition()

    @contextmanager
    def held(self) -> Iterator[None]:
        with self.changed:
            self.now += 1
            self.most = max(self.most, self.now)
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.now >= self.together, timeout=self.hold_s)
        try:
            yield
        finally:
            with self.changed:
                self.now -= 1


@contextmanager
def serving(answer: Callable[[str, dict[str, Any]], tuple[int, Any]], flight: InFlight) -> Iterator[str]:
    """A threading HTTP server on loopback: each request held by ``flight``, then ``answer(path, body)``."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            with flight.held():
                status, data = answer(self.path, body)
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_engine_endpoints_are_probed_at_once():
    flight = InFlight(together=len(ENDPOINTS))
    with serving(lambda path, _: (200, {"version": "0.11.0"}) if path == "/version" else (404, {}), flight) as url, \
            httpx.Client() as http:
        info = probe(url + "/v1", http)
    assert info.engine == "vllm" and flight.most == len(ENDPOINTS)  # one after another, never more than 1


def tokenizer(differs: dict[str, int]) -> Callable[[str, dict[str, Any]], tuple[int, Any]]:
    """vLLM's /tokenize, one id a character (the id at ``differs[text]`` shifted by one)."""

    def answer(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if path == "/version":
            return 200, {"version": "0.11.0"}
        if path != "/tokenize":
            return 404, {}
        text = body.get("prompt", body.get("content", ""))
        ids = [ord(c) for c in text]
        if text in differs:
            if text == PROBES[1]:
                time.sleep(0.3)  # the first that differs answers last
            ids[differs[text]] += 1
        return 200, {"tokens": ids}

    return answer


def test_the_vocabulary_probes_go_parallel_at_a_time():
    flight = InFlight(together=4, hold_s=0.5)
    with serving(tokenizer({}), flight) as student, serving(tokenizer({}), flight) as teacher_url, \
            TeacherClient(teacher_url, "m", "vllm") as teacher:
        check_vocabulary(teacher, student, parallel=4)
    assert flight.most == 4  # both sides' probes share the --parallel budget


def test_a_refusal_names_the_first_probe_that_differs_though_a_later_one_answered_first():
    flight = InFlight(together=1)
    with serving(tokenizer({}), flight) as student, \
            serving(tokenizer({PROBES[1]: 2, PROBES[3]: 0}), flight) as teacher_url, \
            TeacherClient(teacher_url, "m", "vllm") as teacher, pytest.raises(TeacherRefused) as caught:
        check_vocabulary(teacher, student, parallel=8)
    assert repr(PROBES[1]) in caught.value.message and "(position 2:" in caught.value.message


def scored_runs(fault_server: FaultServer, db: Path, runs: int, calls: int) -> list[str]:
    fault_server.script([reply for _ in range(runs) for reply in growing(calls)])
    return [record(db, fault_server.base_url, calls)[0] for _ in range(runs)]


def score(db: Path, teacher: FaultServer, *args: str):
    return CliRunner().invoke(app, ["score", *args, "--teacher-url", teacher.base_url, "--teacher-model", "t",
                                    "--student-url", teacher.base_url, "--db", f"sqlite:///{db}"])


def test_the_calls_of_runs_shorter_than_parallel_are_in_flight_together(fault_server: FaultServer, tmp_path):
    db = tmp_path / "escrow.db"
    run_ids = scored_runs(fault_server, db, 2, 3)
    with FaultServer(endpoints={"/version": {"version": "0.11.0"}}) as teacher:
        teacher.script([Reply(delay_s=20.0, released_by="go")], cycle=True)
        done: list[Any] = []
        scoring = threading.Thread(target=lambda: done.append(score(db, teacher, *run_ids, "--parallel", "8")))
        scoring.start()
        deadline = time.monotonic() + 10.0
        while len(teacher.requests) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        together = len(teacher.requests)
        teacher.release("go")
        scoring.join(timeout=30)
    assert together == 6  # three calls of each run, not one run's three and then the other's
    (result,) = done
    assert result.exit_code == 0, result.output
    assert all(f"run {run_id[:8]}: 3 calls scored now" in result.stdout for run_id in run_ids)


def test_the_printed_figures_are_those_report_reads_back(fault_server: FaultServer, tmp_path):
    """One call left unscored by a teacher that hung up, scored by the rerun:
    the rerun's figures (the rows it read and the row it wrote) are report's."""
    db = tmp_path / "escrow.db"
    run_ids = scored_runs(fault_server, db, 2, 3)
    with FaultServer(endpoints={"/version": {"version": "0.11.0"}}) as teacher:
        paced = Reply(prefill_ids_per_s=1e6)  # prompt_logprobs rendered from the prompt sent
        teacher.script([paced, Hangup(), *[paced] * 4])
        first = score(db, teacher, *run_ids, "--parallel", "1", "--top-k", "2")
        assert first.exit_code == 1 and "refused:" in first.stdout, first.output
        teacher.script([paced], cycle=True)
        again = score(db, teacher, *run_ids, "--json", "--top-k", "2")
    assert again.exit_code == 0, again.output
    printed = {run["run_id"]: run for run in json.loads(again.stdout)["runs"]}
    assert [printed[run_id]["scored_now"] for run_id in run_ids] == [1, 0]
    for run_id in run_ids:
        reported = CliRunner().invoke(app, ["report", run_id, "--json", "--db", f"sqlite:///{db}"])
        (figures,) = json.loads(reported.stdout)["teacher"]
        keys = ("tokens", "reverse_kl", "outside_top_k", "kl_tokens", "ranked_tokens")
        assert {k: printed[run_id][k] for k in keys} == {k: figures[k] for k in keys}
        assert figures["tokens"] == 9 and figures["reverse_kl"] == 1.0
        assert sum(t["tokens"] for t in printed[run_id]["turns"]) == 9
