"""Pure parts of the sandbox: output capping, apt source parsing, hardening audit."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sandbox.capture import StreamCapture, capture_bytes
from sandbox.errors import ImageBuildError
from sandbox.hardening import Hardening, audit
from sandbox.mirror import parse_deb822, parse_one_line, primary_source


def test_capture_keeps_head_and_tail_with_true_size_and_hash():
    data = b"".join(f"line {i}\n".encode() for i in range(10_000))
    capture = StreamCapture(100)
    for i in range(0, len(data), 777):
        capture.feed(data[i : i + 777])
    out = capture.result()
    assert out.truncated and out.total_bytes == len(data)
    assert out.sha256 == hashlib.sha256(data).hexdigest()
    assert data.startswith(out.head.encode()) and data.endswith(out.tail.encode())
    assert len(out.head) == 50 and len(out.tail) == 50
    assert f"{len(data) - 100} bytes omitted" in out.text()


def test_capture_under_cap_is_exact():
    out = capture_bytes(b"hello", 100)
    assert (out.head, out.tail, out.truncated, out.text()) == ("hello", "", False, "hello")


DEB822 = """Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_and_one_line_sources():
    entries = parse_deb822(DEB822)
    assert [(e.uri, e.suite) for e in entries] == [
        ("http://mirror.example/debian", "bookworm"), ("http://mirror.example/debian", "bookworm-updates"),
        ("http://mirror.example/debian-security", "bookworm-security")]
    assert primary_source(entries).suite == "bookworm"
    one = parse_one_line(
        "# x\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian trixie main\ndeb-src http://x y\n"
    )
    assert [(e.uri, e.suite, e.components) for e in one] == [("http://m.example/debian", "trixie", ("main",))]


def test_no_release_suite_is_a_clear_error():
    with pytest.raises(ImageBuildError, match="no Debian release suite"):
        primary_source(parse_one_line("deb http://security.example/debian-security bookworm-security main\n"))


def test_under_runsc_the_guest_is_held_by_nproc_and_the_cgroup_bounds_the_sandbox():
    runc, runsc = Hardening(image="img", pids=100), Hardening(image="img", pids=100, runtime="runsc")
    assert runc.create_kwargs({})["pids_limit"] == 100
    assert "nproc" not in {u["Name"] for u in runc.create_kwargs({})["ulimits"]}
    assert runsc.create_kwargs({})["pids_limit"] == 100 * 32 + 128
    assert {"Name": "nproc", "Soft": 100, "Hard": 100} in runsc.create_kwargs({})["ulimits"]
    # Memory: each command's address space is the policy's; the cgroup adds gVisor's share.
    assert runc.create_kwargs({})["command"][-3] == "0" and runc.create_kwargs({})["mem_limit"] == runc.memory_bytes
    assert runsc.create_kwargs({})["command"][-3] == str(runsc.memory_bytes)
    assert runsc.create_kwargs({})["mem_limit"] == runsc.memory_bytes + (100 * 4 + 128) * 2**20


def test_audit_flags_each_weakened_field():
    spec = Hardening(image="img")
    kwargs = spec.create_kwargs({"escrow.sandbox": "1", "escrow.run_id": "r"})
    inspect = {
        "HostConfig": {"Runtime": kwargs["runtime"], "NetworkMode": kwargs["network_mode"], "CapDrop": ["ALL"],
                       "CapAdd": list(spec.capabilities),
                       "Privileged": False, "LogConfig": {"Type": "none"},
                       "SecurityOpt": ["no-new-privileges"], "ReadonlyRootfs": True, "Tmpfs": spec.tmpfs,
                       "PidsLimit": spec.pids, "Ulimits": kwargs["ulimits"],
                       "Memory": spec.memory_bytes, "MemorySwap": spec.memory_bytes,
                       "NanoCpus": spec.nano_cpus, "Init": True, "Binds": None},
        "Config": {"User": spec.main_user, "Labels": kwargs["labels"], "Cmd": kwargs["command"]},
        "Mounts": [],
    }
    assert all(f.ok for f in audit(inspect, spec, "r"))
    inspect["HostConfig"]["NetworkMode"] = "bridge"
    inspect["HostConfig"]["MemorySwap"] = -1
    inspect["HostConfig"]["CapAdd"] = [*spec.capabilities, "SYS_PTRACE"]
    inspect["HostConfig"]["LogConfig"] = {"Type": "json-file"}
    inspect["HostConfig"]["Runtime"] = "runc" if spec.runtime == "runsc" else "runsc"
    inspect["HostConfig"]["Ulimits"] = [u for u in kwargs["ulimits"] if u["Name"] != "core"]
    assert {f.field for f in audit(inspect, spec, "r") if not f.ok} == {
        "HostConfig.Runtime",
        "HostConfig.Ulimits",
        "HostConfig.NetworkMode",
        "HostConfig.MemorySwap",
        "HostConfig.CapAdd",
        "HostConfig.LogConfig.Type",
    }


def test_the_policys_file_cap_reaches_the_sandbox_and_is_bounded(tmp_path):
    from policies.loading import load_policy
    from policies.model import Resources

    default = load_policy(None)
    assert Hardening.from_policy("img", default).workspace_files == default.resources.workspace_files == 50_000
    few = tmp_path / "few.toml"
    few.write_text((Path(__file__).resolve().parents[2] / "policies" / "default.toml").read_text()
                   .replace("workspace_files = 50000", "workspace_files = 5000"))
    assert Hardening.from_policy("img", load_policy(few)).workspace_files == 5000
    with pytest.raises(ValueError, match="workspace_files"):
        Resources(workspace_files=10)
