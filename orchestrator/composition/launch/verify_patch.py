"""``escrow verify-patch``: a recorded run's patch judged again under today's
rules. The patch is applied to a fresh sandbox of the run's repository (or
another given), and today's submit path runs on it as a run's would: the
verifier's copy (what it leaves out or overrides, and why: the flags), the
verifier in a fresh container, the canary when that fails."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from orchestrator.canonical import recorded_bytes
from orchestrator.contract import Frozen
from orchestrator.errors import ConfigError, NothingToReport
from orchestrator.runspec import RunSpec
from orchestrator.settings import Settings
from policies import Flag, Policy
from sandbox import Sandbox, ToolBox, connect, require_image
from sandbox.execution import ExecLimits
from sandbox.runtime import choose_runtime
from store import Store

_APPLY_LIMITS = ExecLimits(timeout_s=120, stdout_cap=4096, stderr_cap=4096)


class PatchVerification(Frozen):
    """What a recorded patch gets today. ``verdict`` is None when the
    verifier was not run (``--flags-only``) or the run had no verify command."""

    run_id: str
    repo: str
    verify: str | None
    recorded_verdict: str | None
    patch_sha256: str
    files: tuple[str, ...]
    flagged: tuple[Flag, ...]
    verdict: str | None = None
    observation: str | None = None


def verify_patch(settings: Settings, ref: str, *, repo: Path | None = None,
                 run_verifier: bool = True) -> PatchVerification:
    """Re-verify run ``ref``'s recorded patch; typed errors for a missing run
    (RunNotFound), patch (NothingToReport), repository (ConfigError) or
    Docker (DaemonUnavailable, ImageMissing)."""
    with Store.open(settings.store_url, readonly=True, create=False) as store:
        run = store.run(ref)
        patches = store.events(run.id, "patch")
    if not patches or not recorded_bytes(patches[-1].data):
        raise NothingToReport(f"run {run.id} recorded no patch to verify", run_id=run.id)
    data = recorded_bytes(patches[-1].data)
    spec_data = run.config.get("spec")
    try:
        spec = RunSpec.model_validate(spec_data) if isinstance(spec_data, dict) else None
        policy = Policy.model_validate(run.policy)
    except ValidationError as exc:
        raise ConfigError(f"run {run.id} has a spec or policy this escrow cannot read: {exc.errors()[0]['msg']}",
                          run_id=run.id) from exc
    where = (repo or Path(run.repo)).expanduser()
    if not where.is_dir():
        raise ConfigError(f"the run's repository {where} is not a directory; give it with --repo", repo=str(where))
    client = connect(settings.docker_host)
    image = str(run.config.get("sandbox_image") or settings.sandbox_image)
    require_image(client, image)
    runtime = choose_runtime(client, settings.sandbox_runtime).name
    verify = spec.verifier if spec is not None else None
    with Sandbox.start(client, image, policy, where.resolve(), runtime=runtime) as sandbox:
        applied = sandbox.exec(["/usr/bin/git", "-c", "core.attributesFile=/dev/null", "apply", "--whitespace=nowarn",
                                "-"], _APPLY_LIMITS, stdin=data)
        if applied.exit_code != 0:
            raise ConfigError(f"run {run.id}'s patch does not apply to {where} (is it the run's repository, as it "
                              f"was?): {applied.stderr.text()[:300]}", run_id=run.id, repo=str(where))
        toolbox = ToolBox(sandbox, policy, verifier_command=verify,
                          verifier_patch=spec.verifier_patch if spec is not None else None)
        verdict: str | None = None
        observation: str | None = None
        if run_verifier and verify:
            result = toolbox.submit()
            if result.patch is None:  # refused before the verifier ran: the copy's flags still tell why
                patch = toolbox.flagged(toolbox.workspace_patch())
            else:
                patch = result.patch
            verdict, observation = ("PASS" if result.verifier_passed else "FAIL"), result.observation
        else:
            patch = toolbox.flagged(toolbox.workspace_patch())
    return PatchVerification(run_id=run.id, repo=str(where), verify=verify, recorded_verdict=run.verdict,
                             patch_sha256=patch.sha256, files=tuple(patch.files), flagged=tuple(patch.flagged),
                             verdict=verdict, observation=observation)
