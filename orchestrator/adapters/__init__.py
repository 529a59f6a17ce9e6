"""The orchestrator's adapters: ``model_client`` (the HTTP client of the
model engines) and ``fault_server`` (our fault-injecting model server, for
tests and benches). The core may import neither (``.importlinter``,
``tests/test_layers.py``)."""
