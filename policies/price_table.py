"""The versioned price table: the shipped defaults (policies/prices.toml) with
local overrides from ESCROW_HOME/prices.toml layered over them, field by field.

A model in neither file has no price: reports count it as $0 and say so.
Every figure is validated on load; a bad file is a PriceTableError naming the
file, the model and the field, never a half-read table.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from orchestrator.canonical import canonical_json, sha256_hex
from orchestrator.contract import Frozen
from orchestrator.errors import ConfigError
from policies.pricing import Price

SHIPPED_PRICES = Path(__file__).with_name("prices.toml")
LOCAL_FILE_NAME = "prices.toml"
PRICE_FIELDS = ("input_per_mtok", "cached_input_per_mtok", "output_per_mtok", "gpu_per_hour")
TOP_LEVEL_KEYS = ("version", "models")

Entries = dict[str, dict[str, float]]


class PriceTableError(ConfigError):
    """A price file or a price edit is invalid."""


class PriceTable(Frozen):
    """The effective table. ``version`` names the shipped table and, when local
    overrides exist, a digest of them, so a report says exactly what priced it."""

    version: str
    sources: tuple[str, ...]
    prices: dict[str, Price]
    overridden: tuple[str, ...] = ()

    def lookup(self, model: str | None) -> Price | None:
        return None if model is None else self.prices.get(model)


def local_price_path(home: Path) -> Path:
    return home / LOCAL_FILE_NAME


def check_figure(origin: str, model: str, field: str, value: object) -> float:
    where = f"{origin}: model {model!r}: {field}"
    if field not in PRICE_FIELDS:
        raise PriceTableError(f"{where}: unknown key (allowed: {', '.join(PRICE_FIELDS)})", field=field)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PriceTableError(f"{where}: must be a number, not {value!r}", field=field)
    if not math.isfinite(value) or value < 0:
        raise PriceTableError(f"{where}: must be a finite number >= 0, not {value!r}", field=field)
    return float(value)


def parse_prices(text: str, origin: str) -> tuple[str | None, Entries]:
    """(version, {model: {field: figure}}) from TOML text; raises PriceTableError."""
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PriceTableError(f"{origin} is not valid TOML: {exc}", path=origin) from None
    unknown = sorted(set(data) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise PriceTableError(f"{origin}: unknown top-level keys {unknown} (allowed: version, models)", path=origin)
    version = data.get("version")
    if version is not None and not isinstance(version, str):
        raise PriceTableError(f"{origin}: version must be a string", path=origin)
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise PriceTableError(f"{origin}: models must be a table of [models.\"NAME\"] entries", path=origin)
    entries: Entries = {}
    for model, fields in models.items():
        if not isinstance(fields, dict):
            raise PriceTableError(f"{origin}: model {model!r} must be a table of prices", path=origin)
        entries[model] = {field: check_figure(origin, model, field, value) for field, value in fields.items()}
    return version, entries


def read_prices(path: Path) -> tuple[str | None, Entries]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PriceTableError(f"cannot read price file {path}: {exc.strerror or exc}", path=str(path)) from None
    except UnicodeDecodeError:
        raise PriceTableError(f"price file {path} is not UTF-8 text", path=str(path)) from None
    return parse_prices(text, str(path))


def build_table(shipped_version: str, shipped: Entries, local: Entries, sources: tuple[str, ...]) -> PriceTable:
    merged: Entries = {model: dict(fields) for model, fields in shipped.items()}
    for model, fields in local.items():
        merged.setdefault(model, {}).update(fields)
    try:
        prices = {model: Price(model=model, **fields) for model, fields in merged.items()}
    except ValidationError as exc:  # the checks above make this unreachable for valid files
        raise PriceTableError(f"invalid price table: {exc.errors()[0]['msg']}") from None
    version = shipped_version
    if local:
        version += "+local." + sha256_hex(canonical_json(local))[:8]
    return PriceTable(version=version, sources=sources, prices=prices, overridden=tuple(sorted(local)))


def load_price_table(home: Path | None, shipped_path: Path = SHIPPED_PRICES) -> PriceTable:
    """Shipped defaults, overridden field by field by ``home``'s prices.toml."""
    shipped_version, shipped = read_prices(shipped_path)
    sources = [str(shipped_path)]
    local: Entries = {}
    if home is not None and local_price_path(home).exists():
        _, local = read_prices(local_price_path(home))
        sources.append(str(local_price_path(home)))
    return build_table(shipped_version or "unversioned", shipped, local, tuple(sources))


def render_prices(entries: Mapping[str, Mapping[str, float]], header: str) -> str:
    """TOML text for a models table (model names quoted as TOML basic strings)."""
    lines = [f"# {header}", ""]
    for model in sorted(entries):
        lines.append(f"[models.{json.dumps(model)}]")
        lines += [f"{field} = {float(entries[model][field])!r}" for field in PRICE_FIELDS if field in entries[model]]
        lines.append("")
    return "\n".join(lines)


def write_local(home: Path, entries: Entries) -> Path:
    path = local_price_path(home)
    text = render_prices(entries, "Local price overrides, layered over Escrow's shipped table (escrow price set).")
    parse_prices(text, str(path))  # never write a file we could not read back
    try:
        home.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".toml.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise PriceTableError(f"cannot write {path}: {exc.strerror or exc}", path=str(path)) from None
    return path


def set_price(home: Path, model: str, figures: Mapping[str, float | None]) -> Path:
    """Set some fields of ``model``'s local override; returns the file written."""
    if not model.strip():
        raise PriceTableError("a model name must not be empty")
    given = {f: check_figure("price set", model, f, v) for f, v in figures.items() if v is not None}
    if not given:
        raise PriceTableError("give at least one of --input, --cached-input, --output, --gpu-hour")
    path = local_price_path(home)
    _, local = read_prices(path) if path.exists() else (None, {})
    local.setdefault(model, {}).update(given)
    return write_local(home, local)


def unset_price(home: Path, model: str) -> bool:
    """Drop ``model``'s local override; False when it had none."""
    path = local_price_path(home)
    if not path.exists():
        return False
    _, local = read_prices(path)
    if local.pop(model, None) is None:
        return False
    write_local(home, local)
    return True
