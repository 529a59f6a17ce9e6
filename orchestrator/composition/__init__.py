"""The composition: ``launch`` (the library entry point, ``run_agent``, and
what it wires together) and ``batch`` (task files, the local pool and the
Ray executor). The core may import neither (``.importlinter``,
``tests/test_layers.py``)."""
