"""What ``python3 -I -S -c`` runs in the container: the executor's modules,
made from their sources, then the executor's main. Stdlib only.

The container has no ``sandbox`` package (and ``-I -S`` would not look for
one): the host sends the sources of the executor's modules, a dict of dotted
name to source written into the program as a literal, in an order where
each comes after those it imports (sandbox/executor.py builds the program).
Each is created here under its real dotted name, so the same ``from
sandbox.X import y`` that ruff and mypy check on the host resolves to it.
"""

import sys
import types


def load_modules(sources):
    """A ``sandbox`` package, then each module of ``sources`` in its order."""
    package = types.ModuleType("sandbox")
    package.__path__ = []  # a package, whose submodules are all in sys.modules already
    sys.modules["sandbox"] = package
    for name, source in sources.items():
        module = types.ModuleType(name)
        module.__file__ = name.replace(".", "/") + ".py"  # how tracebacks name it
        sys.modules[name] = module
        exec(compile(source, module.__file__, "exec"), module.__dict__)
        setattr(package, name.rpartition(".")[2], module)


def run_executor(sources):
    load_modules(sources)
    sys.modules["sandbox.executor_script"].main()
