"""One Settings object: built once by the CLI (flags > environment > config
file > defaults) and passed down to every component. Nothing reads the
environment after this."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import ConfigError

ENV_PREFIX = "ESCROW_"
DEFAULT_SANDBOX_IMAGE = "escrow-sandbox:bookworm-3-evidence"
# The sandbox's OCI runtime as asked for; sandbox.runtime turns it into the one used.
RuntimeWanted = Literal["auto", "runsc", "runc"]
RUNTIME_CHOICES: tuple[RuntimeWanted, ...] = ("auto", "runsc", "runc")
ConstrainWanted = Literal["auto", "tools", "off"]
CONSTRAIN_CHOICES: tuple[ConstrainWanted, ...] = ("auto", "tools", "off")


def default_home() -> Path:
    return Path(os.environ.get("ESCROW_HOME") or Path.home() / ".escrow")


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path = Field(default_factory=default_home, description="All state lives here (ESCROW_HOME).")
    db_url: str | None = Field(
        default=None, description="SQLAlchemy URL, or a SQLite file's path; default sqlite file in home."
    )
    model_url: str = "http://127.0.0.1:8088/v1"
    model: str | None = Field(default=None, description=(
        "The model id sent to the server (--model, ESCROW_MODEL). Unset: the one model the server lists at "
        "/v1/models; a server listing several (or none) asks for --model."))
    api_key: str | None = None
    policy: Path | None = None
    sandbox_image: str = DEFAULT_SANDBOX_IMAGE
    # auto: gVisor wherever dockerd has it (scripts/setup.sh registers it), as
    # the sandbox's guarantees hold under both (docs/SANDBOX.md, "Runtimes").
    sandbox_runtime: RuntimeWanted = Field(default="auto", description=(
        "The sandbox's OCI runtime: auto (the default: runsc when dockerd has it, else runc), runsc (gVisor's "
        "user-space kernel) or runc (the host's kernel) (ESCROW_SANDBOX_RUNTIME, --runtime)."))
    docker_host: str | None = None
    tool_protocol: str = "native"
    constrain: ConstrainWanted | None = Field(default=None, description=(
        "Constrained decoding of tool calls: tools (a grammar from the allowed tools' schemas, or tool_choice "
        "required for native calls), off, or auto: tools where the probed engine supports it. Unset: the "
        "policy's tools.constrain (ESCROW_CONSTRAIN, --constrain)."))
    system_role: str = "system"
    tokenizer: str = "auto"
    max_turns: int | None = None
    budget_usd: float | None = None
    context_window: int | None = None
    max_output_tokens: int = 512
    deadline_s: float = 120.0
    stream: bool = True
    temperature: float = 0.0
    seed: int | None = 0
    logprobs: int | None = Field(
        default=None, ge=0, le=20, description="Top-k logprobs recorded per token; None: none."
    )
    token_exact: bool = Field(default=False, description=(
        "The token-in loop: the client holds the conversation's token ids and sends each prompt as ids "
        "(llama.cpp's llama-server and vLLM; docs/TOKENS.md) (ESCROW_TOKEN_EXACT, --token-exact)."))
    verify_early: bool | None = Field(default=None, description=(
        "Start the verifier's container (and its pre-pass) while the agent works, so a submit pays only the "
        "copy and the tests, at the cost of one more container per run. None: on for a run, off for a "
        "batch's runs, whose early starts would not wait for --start-slots "
        "(ESCROW_VERIFY_EARLY, --verify-early/--no-verify-early)."))
    log_json: bool = False
    lease_s: float = Field(default=30.0, gt=0, description=(
        "How long a run's lease lasts unrenewed (renewed every third of it): a run whose process is gone "
        "reads crashed once it lapses (ESCROW_LEASE_S)."))

    @field_validator("db_url")
    @classmethod
    def _file_path_as_url(cls, value: str | None) -> str | None:
        # A URL always names its dialect ("sqlite://..."); anything else is a
        # file path, made absolute here, where it was given (a Ray worker
        # elsewhere reads the same file).
        if value is None or "://" in value:
            return value
        return f"sqlite:///{Path(value).expanduser().resolve()}"

    @property
    def store_url(self) -> str:
        return self.db_url or f"sqlite:///{self.home / 'escrow.db'}"

    @property
    def model_name(self) -> str:
        """``model``, which a run needs named (``reach.require_model`` names it from the server)."""
        if not self.model:
            raise ConfigError("no model named: give --model NAME")
        return self.model


_ENV_FIELDS = {name: ENV_PREFIX + name.upper() for name in Settings.model_fields if name != "home"}


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Merge config file, ``ESCROW_*`` variables and explicit overrides (in that
    order of increasing precedence). ``None`` overrides are ignored."""
    values: dict[str, Any] = {}
    home = default_home()
    path = config_file or home / "config.toml"
    if path.exists():
        try:
            values.update(tomllib.loads(path.read_text(encoding="utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}", path=str(path)) from exc
    elif config_file is not None:
        raise ConfigError(f"config file {path} does not exist", path=str(path))
    for name, var in _ENV_FIELDS.items():
        if var in os.environ:
            values[name] = os.environ[var]
    values.update({k: v for k, v in overrides.items() if v is not None})
    values.setdefault("home", home)
    # Docker's own variable, read here once like every other: past Settings,
    # no component looks at the environment (sandbox.connect included).
    if values.get("docker_host") is None and os.environ.get("DOCKER_HOST"):
        values["docker_host"] = os.environ["DOCKER_HOST"]
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid settings: {problems}") from exc
