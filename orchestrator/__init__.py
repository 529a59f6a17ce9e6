"""Escrow's orchestrator: the core (contract, envelope, loop, context, replay
logic, costing), the model-client adapter, and the composition that runs
them (``orchestrator.composition.launch``, ``orchestrator.composition.batch``).

This package's ``__init__`` imports nothing, so that importing any one part
(an adapter importing a core type) does not load the others. The layers are
drawn in docs/ARCHITECTURE.md and enforced by ``.importlinter``.
"""

__version__ = "0.1.0"
