"""Batch runs: task files, batches in the store, and the executors that run
each task as one agent run through the library entry point (``orchestrator.composition.launch``)."""
