"""``escrow policy check``: valid, invalid and missing files; JSON; no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app

DEFAULT = Path(__file__).resolve().parents[2] / "policies" / "default.toml"


def test_check_explains_grants_as_json():
    result = CliRunner().invoke(app, ["policy", "check", str(DEFAULT), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["valid"] and data["policy"]["network"] == {"enabled": False}
    assert "network: none" in data["grants"]


def test_invalid_policy_subprocess_has_no_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[tools]\nallowed = ['bash', 'rm_rf']\n")
    escrow = Path(sys.executable).with_name("escrow")
    for target in (bad, tmp_path / "missing.toml"):
        proc = subprocess.run([str(escrow), "policy", "check", str(target)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 65
        assert proc.stderr.startswith("error: policy") and "Traceback" not in proc.stderr
    assert "rm_rf" in subprocess.run([str(escrow), "policy", "check", str(bad)], capture_output=True, text=True).stderr


def test_apply_section_is_explained_and_strict(tmp_path):
    result = CliRunner().invoke(app, ["policy", "check", str(DEFAULT)])
    assert result.exit_code == 0, result.output
    assert "--apply: refuses patches touching git metadata, CI configuration, outside the repo, protected " \
           "verifier input, hidden verifier input, shadows an installed module" in " ".join(result.output.split())
    granted = tmp_path / "ci.toml"
    granted.write_text(DEFAULT.read_text().replace("ci_config = false", "ci_config = true"))
    result = CliRunner().invoke(app, ["policy", "check", str(granted), "--json"])
    data = json.loads(result.stdout)
    assert data["policy"]["apply"]["ci_config"] is True
    assert "--apply: EXPLICITLY ALLOWED to write CI configuration into your checkout" in data["grants"]
    assert "touching git metadata, outside the repo, protected verifier input" in " ".join(data["grants"])
    typo = tmp_path / "typo.toml"
    typo.write_text(DEFAULT.read_text().replace("ci_config = false", "ci_configs = true"))
    result = CliRunner().invoke(app, ["policy", "check", str(typo)])
    assert getattr(result.exception, "exit_code", None) == 65 and "'ci_configs' in [apply]" in str(result.exception)


def test_verify_accept_is_explained_and_validated(tmp_path):
    result = CliRunner().invoke(app, ["policy", "check", str(DEFAULT)])
    text = " ".join(result.output.split())
    assert "verifier: takes only the patch's UTF-8 text of the repo's kinds (allow-list)" in text
    assert "not accepted for verification" in text  # --apply refuses what the allow-list left out
    wide = tmp_path / "wide.toml"
    wide.write_text(DEFAULT.read_text().replace("# accept = []", 'accept = ["assets/**", "tools/*.sh"]'))
    result = CliRunner().invoke(app, ["policy", "check", str(wide), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["policy"]["verify"]["accept"] == ["assets/**", "tools/*.sh"]
    assert any(g.startswith("verifier: ACCEPTS as the patch made them, past its allow-list: assets/**, tools/*.sh")
               for g in data["grants"])
    bad = tmp_path / "bad.toml"
    bad.write_text(DEFAULT.read_text().replace("# accept = []", 'accept = ["../outside/**"]'))
    result = CliRunner().invoke(app, ["policy", "check", str(bad)])
    assert getattr(result.exception, "exit_code", None) == 65 and "workspace-relative" in str(result.exception)
