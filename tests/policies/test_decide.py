"""The ACL decision and policy loading (pure; no Docker)."""

from __future__ import annotations

import pytest

from policies import (
    Effect,
    PathAccess,
    PathRejected,
    PolicyError,
    canonical_path,
    decide,
    default_policy,
    explain,
    parse_policy,
)


class Args:
    def __init__(self, *accesses: PathAccess) -> None:
        self.accesses = accesses

    def path_accesses(self):
        return self.accesses


def read(path):
    return Args(PathAccess(mode="read", path=path))


def write(path):
    return Args(PathAccess(mode="write", path=path))


NARROW = parse_policy("""
name = "narrow"
[tools]
allowed = ["bash", "read_file", "write_file", "list_files"]
[tools.approval]
bash = "ask"
list_files = "deny"
[paths]
read = ["src/**", "README.md"]
write = ["src/*.py"]
deny = ["src/secret*"]
""")


@pytest.mark.parametrize("raw,expected", [
    ("a/b/../c", "a/c"), ("./a//b/", "a/b"), ("/workspace/x", "x"), ("/workspace", "."), (".", "."),
    ("//workspace/x", "x"),
])
def test_canonical_path(raw, expected):
    assert canonical_path(raw) == expected


@pytest.mark.parametrize(
    "raw", ["../x", "a/../../x", "/etc/passwd", "/workspace/../etc", "a\x00b", "", "/workspacefoo/x"]
)
def test_canonical_path_rejects(raw):
    with pytest.raises(PathRejected):
        canonical_path(raw)


@pytest.mark.parametrize("tool,args,verdict,rule", [
    ("read_file", read("src/a/b.py"), Effect.ALLOW, "tools.allowed paths.read[src/**]"),
    ("read_file", read("README.md"), Effect.ALLOW, "tools.allowed paths.read[README.md]"),
    ("read_file", read("docs/x.md"), Effect.DENY, "paths.read"),
    ("write_file", write("src/a.py"), Effect.ALLOW, "tools.allowed paths.write[src/*.py]"),
    ("write_file", write("src/a/b.py"), Effect.DENY, "paths.write"),
    ("write_file", write("src/secret.py"), Effect.DENY, "paths.deny[src/secret*]"),
    ("write_file", write("../src/a.py"), Effect.DENY, "paths.canonical"),
    ("edit_file", write("src/a.py"), Effect.DENY, "tools.allowed"),
    ("list_files", read("src"), Effect.DENY, "tools.approval.list_files"),
    ("bash", Args(), Effect.ASK, "tools.approval.bash"),
    ("launch_missiles", Args(), Effect.DENY, "tools.known"),
])
def test_decide_names_the_rule(tool, args, verdict, rule):
    decision = decide(tool, args, NARROW)
    assert (decision.effect, decision.rule) == (verdict, rule)
    assert decision.tool == tool and decision.reason


def test_default_policy_is_safe():
    policy = default_policy()
    assert policy.network.enabled is False
    assert decide("write_file", write(".git/hooks/pre-commit"), policy).effect is Effect.DENY
    assert decide("write_file", write(".git"), policy).effect is Effect.DENY
    assert decide("read_file", read("/etc/passwd"), policy).effect is Effect.DENY
    assert any("network: none" == line for line in explain(policy))


@pytest.mark.parametrize("text,fragment", [
    ("[tools]\nallowed = ['rm']\n", "unknown tool"),
    ("[paths]\nread = ['../x']\n", "workspace-relative"),
    ("[network]\nenabled = true\nproxy = 'x'\n", "unknown key 'proxy' in [network] (it takes enabled)"),
    ("[resources]\nmemory_mb = 1\n", "memory_mb"),
    ("[tools]\nallowed = ['write_file']\n[paths]\nwrite = []\n", "grants no path"),
    ("[tools.approval]\nbash = 'maybe'\n", "tools.approval.bash"),
    ("not toml ===", "not valid TOML"),
])
def test_invalid_policies_are_explained(text, fragment):
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.toml")
    assert fragment in info.value.message and info.value.exit_code == 65


@pytest.mark.parametrize("text,said", [
    ("[limits]\nmax_turnz = 3\n", "unknown key 'max_turnz' in [limits] (did you mean 'max_turns'?)"),
    ("[tools]\nalowed = ['bash']\n", "unknown key 'alowed' in [tools] (did you mean 'allowed'?)"),
    ("limitz = 3\n", "unknown key 'limitz' in the top level (did you mean 'limits'?)"),
])
def test_a_misspelled_key_is_named_with_the_key_meant(text, said):
    """Issue 42, group 13: a misspelling reads as what was meant, not as
    pydantic's "Extra inputs are not permitted"."""
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.toml")
    assert said in info.value.message and "Extra inputs" not in info.value.message
