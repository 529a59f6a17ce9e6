"""The run's remaining wall time flows into each tool call as an argument
(``ToolBox.execute(..., time_left_s=)`` → ``ToolArgs.run`` → the ToolHost
primitive → ``ToolBox.limits``), never kept on the ToolBox: a command and a
submit's verifier are killed at it, and the next call is not bound by it."""

from __future__ import annotations

import pytest

from orchestrator.toolset import BashArgs, ListFilesArgs, SubmitArgs
from policies import default_policy
from sandbox import ToolBox


class Host:
    """A ToolHost that says what each primitive was given."""

    def command(self, tool, command, timeout_s, *, time_left_s):
        return ("command", time_left_s)

    def file_op(self, tool, request, *, time_left_s):
        return ("file_op", time_left_s)

    def submit(self, *, time_left_s):
        return ("submit", time_left_s)


@pytest.mark.parametrize(("args", "primitive"), [
    (BashArgs(command="true"), "command"), (ListFilesArgs(path="."), "file_op"), (SubmitArgs(), "submit"),
])
def test_each_tool_hands_the_time_left_to_its_primitive(args, primitive):
    assert args.run(Host(), time_left_s=7.5) == (primitive, 7.5)
    assert args.run(Host(), time_left_s=None) == (primitive, None)


def test_the_timeout_is_the_least_of_policy_call_and_time_left():
    box = ToolBox.__new__(ToolBox)
    box.policy = default_policy()
    policy_s = box.policy.resources.command_timeout_s
    assert box.limits().timeout_s == policy_s
    assert box.limits(5.0, time_left_s=2.0).timeout_s == 2.0
    assert box.limits(1.0, time_left_s=2.0).timeout_s == 1.0
    assert box.limits(time_left_s=policy_s + 10).timeout_s == policy_s


@pytest.mark.docker
def test_a_command_and_a_submit_stop_at_the_time_left_and_the_next_call_is_free(start_sandbox, demo_repo):
    box = ToolBox(start_sandbox(demo_repo), default_policy(), verifier_command="sleep 300; python3 -m pytest -q")
    cut = box.execute("bash", BashArgs(command="sleep 300; echo never"), time_left_s=1.0)
    assert cut.timed_out and "never" not in cut.observation
    submitted = box.execute("submit", SubmitArgs(), time_left_s=1.0)
    assert submitted.timed_out and submitted.verifier_passed is False, submitted.observation
    free = box.execute("bash", BashArgs(command="sleep 2; echo done"))
    assert free.ok and not free.timed_out and "done" in free.observation
