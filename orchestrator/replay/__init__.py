"""Deterministic replay: offline replay against the recording, re-execution
of the tools in a fresh sandbox, and forks that continue live.

The environment (Docker) parts load on first use, so offline replay imports
no docker client.
"""

from orchestrator.replay.digest import trajectory_digest
from orchestrator.replay.divergence import compare, differing_paths, readable_diff
from orchestrator.replay.errors import ChainRefused, Divergence, RecordingUnusable, ReplayError
from orchestrator.replay.findings import DivergenceView, ReplayReport
from orchestrator.replay.recorded import ForkPoint, RecordedRun, RecordedTool, RecordedTurn, from_trajectory
from orchestrator.replay.replay_journal import NullJournal, ReplayJournal
from orchestrator.replay.replay_model import Cursor, ReplayModel, TurnCheck
from orchestrator.replay.replay_tools import ReplayTools, ToolDrift
from orchestrator.replay.replayer import ForkOverrides, Loaded, Replayer

__all__ = [
    "ChainRefused", "Cursor", "Divergence", "DivergenceView", "ForkOverrides", "ForkPoint", "Loaded", "NullJournal",
    "RecordedRun", "RecordedTool", "RecordedTurn", "RecordingUnusable", "ReplayError", "ReplayJournal", "ReplayModel",
    "ReplayReport", "ReplayTools", "Replayer", "ToolDrift", "TurnCheck", "compare", "differing_paths",
    "from_trajectory", "readable_diff", "trajectory_digest",
]
