"""File operations run under the commands' memory limit, on every runtime:
under runsc a ``read_file`` of a 3 GB sparse file read it whole (several
times over, as bytes, text and lines) with no limit and ended the sandbox,
gVisor having no OOM killer. A large file is now streamed (only the lines
asked for are kept) and the op's process holds the command's RLIMIT_AS;
the sandbox survives every variant and still answers."""

from __future__ import annotations

import json

import pytest

from orchestrator.toolset import TOOLS
from policies import default_policy
from sandbox import ToolBox

pytestmark = pytest.mark.docker

POLICY = default_policy()


def call(toolbox: ToolBox, tool: str, **args: object):
    return toolbox.execute(tool, TOOLS[tool].model_validate_json(json.dumps(args)))


@pytest.fixture
def box(start_sandbox, demo_repo):
    return start_sandbox(demo_repo, POLICY)


def survives(toolbox: ToolBox) -> None:
    result = call(toolbox, "bash", command="echo alive")
    assert result.ok and "alive" in result.observation, result.observation
    assert toolbox.sandbox.inspect()["State"]["Running"]


@pytest.mark.parametrize("args", [
    {},
    {"start_line": 2},
    {"start_line": 1, "max_lines": 1},
], ids=["whole", "from-line-2", "one-line"])
def test_reading_a_huge_sparse_file_is_bounded_and_the_sandbox_survives(box, args):
    toolbox = ToolBox(box, POLICY)
    assert call(toolbox, "bash", command="truncate -s 3G big.bin").ok
    result = call(toolbox, "read_file", path="big.bin", **args)
    survives(toolbox)
    assert result.ok, result.observation  # streamed: at most the read cap comes back
    assert len(result.observation.encode()) < POLICY.resources.read_cap_bytes + 4096
    if args.get("start_line", 1) == 1:  # one line of 3 GB of zeros, cut at the cap, its size told
        assert result.observation.endswith(f" bytes of {3 * 2**30}]"), result.observation[-200:]


def test_editing_a_huge_sparse_file_fails_within_the_limit_and_the_sandbox_survives(box):
    toolbox = ToolBox(box, POLICY)
    assert call(toolbox, "bash", command="truncate -s 3G big.txt").ok
    result = call(toolbox, "edit_file", path="big.txt", old="x", new="y")
    assert not result.ok
    survives(toolbox)


def test_a_large_file_streamed_gives_the_lines_asked_for(box):
    """Past 16 MB a read is streamed: the window and the counts are the
    same as a whole read's for \\n-ended lines."""
    toolbox = ToolBox(box, POLICY)
    make = "python3 -c \"import sys; sys.stdout.write(''.join('line %07d\\n' % i for i in range(2000000)))\" > many.txt"
    assert call(toolbox, "bash", command=make).ok
    result = call(toolbox, "read_file", path="many.txt", start_line=1500001, max_lines=2)
    assert result.ok, result.observation
    assert result.observation.startswith("line 1500000\nline 1500001\n"), result.observation[:200]
    assert "line 1500002" not in result.observation
