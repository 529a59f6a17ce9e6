import pytest
from pydantic import ValidationError

from orchestrator.context import Budget, Margin, resolve_budget
from orchestrator.errors import ConfigError


def test_available_is_window_minus_output_ceiling():
    assert Budget(s_max=8192, k_max=512).available == 7680


def test_output_ceiling_must_leave_room():
    with pytest.raises(ValidationError):
        Budget(s_max=512, k_max=512)


def test_margin_rounds_up():
    assert Margin(ratio=0.1, fixed=16).apply(1001) == 1001 + 101 + 16
    assert Margin(ratio=0.0, fixed=0).apply(7) == 7


def test_window_sources():
    assert resolve_budget(configured=8192, discovered=None, k_max=512).source == "config"
    assert resolve_budget(configured=None, discovered=32768, k_max=512).s_max == 32768
    both = resolve_budget(configured=65536, discovered=32768, k_max=512)
    assert (both.s_max, both.source) == (32768, "config+server")


def test_unknown_window_is_a_config_error():
    with pytest.raises(ConfigError, match="context_window"):
        resolve_budget(configured=None, discovered=None, k_max=512)
    with pytest.raises(ConfigError):
        resolve_budget(configured=256, discovered=None, k_max=512)
