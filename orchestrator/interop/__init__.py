"""Interoperability: other agents' trajectories read into typed records
(one module per format), and Escrow runs written out as ATIF."""

from orchestrator.interop.errors import (
    FormatMismatch,
    SourceError,
    SourceTooLarge,
    UnreadableSource,
    UnsupportedVersion,
)
from orchestrator.interop.formats import detect, read_folder, read_trajectories
from orchestrator.interop.records import (
    FORMATS,
    SourceCall,
    SourceMessage,
    SourceObservation,
    SourceTrajectory,
    SourceUsage,
)
from orchestrator.interop.safe_read import ReadLimits

__all__ = [
    "FORMATS",
    "FormatMismatch",
    "ReadLimits",
    "SourceCall",
    "SourceError",
    "SourceMessage",
    "SourceObservation",
    "SourceTooLarge",
    "SourceTrajectory",
    "SourceUsage",
    "UnreadableSource",
    "UnsupportedVersion",
    "detect",
    "read_folder",
    "read_trajectories",
]
