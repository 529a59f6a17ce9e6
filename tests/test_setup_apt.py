"""Issue 42: set-up survives an interruption. ``apt_install`` (scripts/setup.sh)
took a package an interrupted dpkg left behind for installed (``dpkg -s``
exits 0 for half-installed, unpacked and half-configured ones) and skipped
it. Here dpkg is really interrupted, in a throwaway root (``DPKG_ROOT``,
``APT_CONFIG``: the machine's own package database is never touched): one
package's dpkg is killed in its preinst (half-installed, reinstall
required), one in its postinst (half-configured), one is only unpacked;
``apt_install`` must leave all three installed (dpkg's ``ii``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import require

SETUP = Path(__file__).resolve().parents[1] / "scripts" / "setup.sh"
KILL_ONCE = '#!/bin/sh\n[ -e "{marker}" ] && exit 0\ntouch "{marker}"\nkill -9 $PPID\nsleep 5\n'


def build(work: Path, name: str, script: str | None) -> Path:
    pkg = work / "src" / name
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "usr" / "share" / name).mkdir(parents=True)
    (pkg / "usr" / "share" / name / "data").write_text(name, encoding="utf-8")
    (pkg / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: probe\n",
        encoding="utf-8")
    if script:
        path = pkg / "DEBIAN" / script
        path.write_text(KILL_ONCE.format(marker=work / f"{name}.killed"), encoding="utf-8")
        path.chmod(0o755)
    deb = work / "repo" / f"{name}_1.0_all.deb"
    subprocess.run(["dpkg-deb", "-Zgzip", "--build", str(pkg), str(deb)], check=True, capture_output=True)
    return deb


def state(env: dict[str, str], name: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", name], env=env, capture_output=True,
                          text=True).stdout


def test_apt_install_repairs_what_an_interrupted_dpkg_left(tmp_path: Path) -> None:
    require(all(shutil.which(t) for t in ("dpkg", "dpkg-deb", "dpkg-scanpackages", "apt-get")),
            "dpkg, dpkg-deb, dpkg-scanpackages (dpkg-dev) and apt-get")
    root = tmp_path / "root"
    for folder in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "etc/apt/sources.list.d", "etc/apt/apt.conf.d",
                   "etc/apt/preferences.d", "var/lib/apt/lists/partial", "var/cache/apt/archives/partial",
                   "var/log/apt"):
        (root / folder).mkdir(parents=True)
    (root / "var/lib/dpkg/status").touch()
    (tmp_path / "repo").mkdir()
    debs = {"escrow-probe-h": build(tmp_path, "escrow-probe-h", "preinst"),
            "escrow-probe-f": build(tmp_path, "escrow-probe-f", "postinst"),
            "escrow-probe-u": build(tmp_path, "escrow-probe-u", None)}
    packages = subprocess.run(["dpkg-scanpackages", ".", "/dev/null"], cwd=tmp_path / "repo", check=True,
                              capture_output=True, text=True).stdout
    (tmp_path / "repo" / "Packages").write_text(packages, encoding="utf-8")
    (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] file:{tmp_path / 'repo'} ./\n", encoding="utf-8")
    (tmp_path / "apt.conf").write_text(f'Dir "{root}/";\nDir::State::status "{root}/var/lib/dpkg/status";\n',
                                       encoding="utf-8")
    # Maintainer scripts run outside a chroot (the throwaway root has no shell); not root is allowed.
    env = {**os.environ, "DPKG_ROOT": str(root), "DPKG_FORCE": "script-chrootless,not-root",
           "APT_CONFIG": str(tmp_path / "apt.conf"), "DEBIAN_FRONTEND": "noninteractive"}
    for name in ("escrow-probe-h", "escrow-probe-f"):
        killed = subprocess.run(["dpkg", "-i", str(debs[name])], env=env, capture_output=True, text=True)
        assert killed.returncode == -9 or killed.returncode == 137, killed  # dpkg itself was killed
    subprocess.run(["dpkg", "--unpack", str(debs["escrow-probe-u"])], env=env, check=True, capture_output=True)
    left = {name: state(env, name) for name in debs}
    assert left == {"escrow-probe-h": "iHR", "escrow-probe-f": "iF ", "escrow-probe-u": "iU "}, left
    # What set-up used to ask: dpkg -s says each is there.
    assert all(subprocess.run(["dpkg", "-s", name], env=env, capture_output=True).returncode == 0 for name in debs)

    done = subprocess.run(["bash", "-c", f'source "{SETUP}"; apt_install {" ".join(debs)}'], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert {name: state(env, name) for name in debs} == dict.fromkeys(debs, "ii "), done.stderr
    assert "dpkg --configure -a" in done.stderr  # it says what it repairs
    # And a second run finds them installed: nothing to do, no apt-get.
    again = subprocess.run(["bash", "-c", f'source "{SETUP}"; apt_install {" ".join(debs)}'], env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stderr == "", again.stderr
