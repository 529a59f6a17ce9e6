"""The exit at the Sandbox level, against the real container: the export
never touches a host path, and the verifier's container is fresh."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from policies import default_policy
from sandbox import ExecLimits
from sandbox.errors import ExportRefused
from tests.sandbox.conftest import assert_hardened

pytestmark = pytest.mark.docker
LIMITS = ExecLimits(timeout_s=30, stdout_cap=4096, stderr_cap=4096)


def host_state(*paths: Path) -> list[tuple[int, float, bytes]]:
    return [(os.lstat(p).st_mode, os.lstat(p).st_mtime, p.read_bytes() if p.is_file() else b"") for p in paths]


def test_export_of_hard_links_to_symlinks_leaves_host_paths_alone(start_sandbox, demo_repo, tmp_path):
    secret, directory = tmp_path / "secret", tmp_path / "dir"
    secret.write_text("s\n")
    directory.mkdir()
    for path, mode in ((secret, 0o600), (directory, 0o700)):
        os.chmod(path, mode)
        os.utime(path, (1_000_000, 1_000_000))
    before = host_state(secret, directory)
    sandbox = start_sandbox(demo_repo)
    plant = (f"ln -s {secret} fs && ln fs fh && touch -h -d @86400 fs && "
             f"ln -s {directory} ds && ln ds dh && touch -h -d @86400 ds && "
             "ln -s calc.py inside && ln inside inside_h")
    assert sandbox.bash(plant, LIMITS).exit_code == 0
    patch = sandbox.patch()
    assert host_state(secret, directory) == before
    assert {"fs", "fh", "ds", "dh"} <= {s.path for s in patch.skipped}
    assert set(patch.files) == {"inside", "inside_h"} and patch.text.count("new file mode 120000") == 2


def test_export_caps_hold_for_hard_link_blow_up(start_sandbox, demo_repo):
    sandbox = start_sandbox(demo_repo)
    blow = "head -c 1000000 /dev/urandom | base64 > big && for i in $(seq 600); do ln big l$i; done"
    assert sandbox.bash(blow, LIMITS).exit_code == 0
    # 600 links to 1.3 MB are 800 MB in the verifier's copy (each link a whole
    # file): refused while the export is read, before any diff is made.
    with pytest.raises(ExportRefused, match="each hard link a whole file"):
        sandbox.patch()
    assert sandbox.bash("rm l*", LIMITS).exit_code == 0
    assert "big" in sandbox.patch().files


def test_the_verifier_container_shares_nothing(docker_client, start_sandbox, demo_repo):
    sandbox = start_sandbox(demo_repo)
    assert sandbox.bash("echo m > /tmp/marker && echo w > calc.py.extra && (sleep 300 &) ; true", LIMITS).exit_code == 0
    patch = sandbox.patch()
    with sandbox.fresh(sandbox.starting.archive_of(patch), "verify") as verifier:
        assert verifier.container.id != sandbox.container.id
        assert_hardened(docker_client, verifier, default_policy())
        tmp = verifier.bash("ls -A /tmp", LIMITS).stdout.text()
        extra = verifier.bash("cat calc.py.extra", LIMITS).stdout.text()
        processes = verifier.bash("ps -eo args", LIMITS).stdout.text()
    assert "marker" not in tmp and extra == "w\n" and "sleep 300" not in processes
