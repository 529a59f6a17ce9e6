"""The loop is pure: importing it (and building an agent) pulls in no HTTP,
Docker or database library. Checked in a fresh interpreter."""

import subprocess
import sys


def test_loop_modules_import_no_io_library():
    code = (
        "import sys\n"
        "import orchestrator.agent, orchestrator.runspec, orchestrator.turn_context, orchestrator.perimeter\n"
        "import policies.routing, policies.pricing\n"
        "bad = sorted(m for m in ('httpx', 'docker', 'sqlalchemy', 'sqlite3', 'sqlmodel') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"loop imports I/O libraries: {out.stdout.strip()}"
