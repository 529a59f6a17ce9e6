"""The shipped price table, local overrides layered over it, and bad price files."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.price_table import (
    SHIPPED_PRICES,
    PriceTableError,
    load_price_table,
    local_price_path,
    parse_prices,
    set_price,
    unset_price,
)


def test_shipped_table_prices_the_local_model_at_zero_and_has_a_gpu_example() -> None:
    table = load_price_table(None)
    gemma = table.lookup("gemma-3-270m")
    assert gemma is not None
    assert (gemma.input_per_mtok, gemma.cached_rate, gemma.output_per_mtok, gemma.gpu_per_hour) == (0, 0, 0, 0)
    assert any(p.gpu_per_hour > 0 and p.input_per_mtok == 0 for p in table.prices.values())
    assert table.version and "+local" not in table.version
    assert table.sources == (str(SHIPPED_PRICES),)
    assert table.lookup("no-such-model") is None


def test_local_override_is_layered_field_by_field(tmp_path: Path) -> None:
    before = load_price_table(tmp_path)
    set_price(tmp_path, "example-hosted-api", {"output_per_mtok": 10.0})
    set_price(tmp_path, "my-vllm", {"gpu_per_hour": 2.5})
    after = load_price_table(tmp_path)
    api = after.prices["example-hosted-api"]
    assert api.output_per_mtok == 10.0
    assert api.input_per_mtok == before.prices["example-hosted-api"].input_per_mtok  # kept from the shipped table
    assert after.prices["my-vllm"].gpu_per_hour == 2.5
    assert after.version.startswith(before.version + "+local.") and after.overridden == (
        "example-hosted-api",
        "my-vllm",
    )
    set_price(tmp_path, "my-vllm", {"gpu_per_hour": 3.0})
    assert load_price_table(tmp_path).version != after.version  # a changed figure changes the version
    assert unset_price(tmp_path, "my-vllm") and not unset_price(tmp_path, "my-vllm")
    assert load_price_table(tmp_path).lookup("my-vllm") is None
    assert "example-hosted-api" in local_price_path(tmp_path).read_text()


def test_model_names_with_quotes_and_dots_round_trip(tmp_path: Path) -> None:
    name = 'org/model.v1 "q8"'
    set_price(tmp_path, name, {"input_per_mtok": 1.5, "cached_input_per_mtok": 0.5})
    price = load_price_table(tmp_path).prices[name]
    assert (price.input_per_mtok, price.cached_rate) == (1.5, 0.5)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[models."m"]\ninput_per_mtok = -1\n', "must be a finite number >= 0"),
        ('[models."m"]\ninput_per_mtok = "cheap"\n', "must be a number"),
        ('[models."m"]\ninput_per_mtok = true\n', "must be a number"),
        ('[models."m"]\ngpu_per_hour = nan\n', "finite"),
        ('[models."m"]\ninput_price = 1\n', "unknown key"),
        ('currency = "EUR"\n', "unknown top-level keys"),
        ('[models]\nm = 3\n', "must be a table"),
        ('version = 3\n', "version must be a string"),
        ('[models."m"\ninput_per_mtok = 1\n', "not valid TOML"),
    ],
)
def test_bad_price_files_are_refused_with_the_place_named(text: str, says: str) -> None:
    with pytest.raises(PriceTableError) as caught:
        parse_prices(text, "prices.toml")
    assert says in caught.value.message and "prices.toml" in caught.value.message
    assert caught.value.exit_code == 2


def test_a_bad_local_file_stops_loading_and_bad_edits_write_nothing(tmp_path: Path) -> None:
    local_price_path(tmp_path).write_text('[models."m"]\noutput_per_mtok = -3\n')
    with pytest.raises(PriceTableError, match="output_per_mtok"):
        load_price_table(tmp_path)
    local_price_path(tmp_path).unlink()
    with pytest.raises(PriceTableError, match=">= 0"):
        set_price(tmp_path, "m", {"input_per_mtok": -0.5})
    with pytest.raises(PriceTableError, match="at least one"):
        set_price(tmp_path, "m", {"input_per_mtok": None})
    assert not local_price_path(tmp_path).exists()
