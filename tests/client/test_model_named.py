"""Issue 42, group 13: without --model, Escrow named every request (and
recorded every run) ``gemma-3-270m``, whatever the server served. Now the
model is the one the server lists at /v1/models, and a server that lists
several, or none, asks for --model before anything is sent."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer, Reply
from orchestrator.adapters.model_client.reach import require_model
from orchestrator.errors import ConfigError


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ESCROW_MODEL", raising=False)


def test_the_one_served_model_is_asked_for_and_named():
    with FaultServer(model="served-7b") as server:
        server.script([Reply(text="hi")])
        shown = CliRunner().invoke(app, ["call", "hi", "--model-url", server.base_url, "--json"])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["model"] == "served-7b"
        assert server.requests[0].json["model"] == "served-7b"


@pytest.mark.parametrize("listing,said", [
    ({"object": "list", "data": [{"id": "a-1b"}, {"id": "b-7b"}]}, "serves 2 models (a-1b, b-7b)"),
    ({"object": "list", "data": []}, "lists no model"),
    ({"error": "no such route"}, "gave no listing at GET /models"),
])
def test_a_server_without_one_model_asks_for_the_flag_and_is_sent_nothing(listing, said):
    with FaultServer(endpoints={"/v1/models": listing}) as server:
        server.script([Reply(text="hi")])
        shown = CliRunner().invoke(app, ["call", "hi", "--model-url", server.base_url, "--json"])
        assert isinstance(shown.exception, ConfigError) and shown.exception.exit_code == 2
        assert said in shown.exception.message and "give --model NAME" in shown.exception.message
        assert server.requests == []  # asked for the flag before any call


def test_a_given_model_is_sent_as_given_without_asking():
    with FaultServer(endpoints={"/v1/models": {"data": [{"id": "a"}, {"id": "b"}]}}) as server:
        assert require_model(server.base_url, "b") == "b"
        server.script([Reply(text="hi")])
        shown = CliRunner().invoke(app, ["call", "hi", "--model-url", server.base_url, "--model", "mine", "--json"])
        assert shown.exit_code == 0 and server.requests[0].json["model"] == "mine"
