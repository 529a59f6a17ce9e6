"""``Sampling.extra`` cannot override what the request sets itself: K_max, the
model, streaming, the messages, the tools, the stop sequences. Attacked at
construction, after a validation-skipping copy, and on the real wire."""

from __future__ import annotations

import pytest

from orchestrator.adapters.fault_server import Reply
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.contract import RESERVED_WIRE_KEYS, ReservedWireKey, Sampling
from orchestrator.envelope import Status
from orchestrator.errors import ContractError


@pytest.mark.parametrize("key", sorted(RESERVED_WIRE_KEYS))
def test_each_reserved_key_is_refused_at_construction(key):
    with pytest.raises(ReservedWireKey) as info:
        Sampling(extra={key: 1, "min_p": 0.05})
    assert info.value.keys == [key] and repr(key) in str(info.value)
    assert isinstance(info.value, ContractError)


def test_the_issue_example_names_every_clash_and_loading_a_record_refuses_it_too():
    extra = {"max_tokens": 100000, "model": "other", "stream": False}
    with pytest.raises(ReservedWireKey) as info:
        Sampling(extra=extra)
    assert info.value.keys == ["max_tokens", "model", "stream"]
    with pytest.raises(ReservedWireKey):
        Sampling.model_validate({"temperature": 0.0, "extra": extra})


def test_engine_specific_keys_still_pass_verbatim(req):
    body = req(sampling=Sampling(extra={"min_p": 0.05, "repetition_penalty": 1.1})).wire_body()
    assert (body["min_p"], body["repetition_penalty"], body["max_tokens"]) == (0.05, 1.1, 64)


def test_a_copy_that_skips_validation_is_refused_at_the_wire(req):
    smuggled = Sampling().model_copy(update={"extra": {"max_tokens": 100000}})
    request = req(max_tokens=64, sampling=smuggled)
    with pytest.raises(ReservedWireKey):
        request.wire_body()


def test_nothing_reaches_the_server_with_a_smuggled_key(srv, req, fast_retry):
    srv.script([Reply(text="should not be asked")])
    smuggled = Sampling().model_copy(update={"extra": {"model": "other", "stream": False}})
    with ModelClient(srv.base_url, retry=fast_retry, token_estimator=lambda s: 0) as client:
        envelope = client.call(req(sampling=smuggled))
    assert envelope.status is Status.FAULTED and "'model', 'stream'" in envelope.error.message
    assert srv.requests == []
