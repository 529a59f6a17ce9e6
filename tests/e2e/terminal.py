"""Real terminals for ``escrow run``: a tmux pane (what a person sees, at a
chosen width) and a pseudo-terminal (every byte the display writes)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shlex
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.conftest import require

ESCROW = Path(sys.executable).parent / "escrow"


def run_args(repo: Path, url: str, *extra: str, task: str = "Fix mean() in calc.py") -> list[str]:
    return [str(ESCROW), "run", task, "--repo", str(repo), "--verify", "python3 -m pytest -q", "--model-url", url,
            "--context-window", "8192", "--tokenizer", "cl100k_base", *extra]


class Tmux:
    """One private tmux server with one pane running a command."""

    def __init__(self, socket: Path, width: int, height: int = 50) -> None:
        require(shutil.which("tmux") is not None, "tmux (apt-get install tmux)")
        self.base = ["tmux", "-S", str(socket), "-f", "/dev/null"]
        self.width, self.height = width, height

    def tmux(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=30, check=True).stdout

    def start(self, args: list[str], env: dict[str, str]) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # The pane's shell may export COLUMNS and LINES as they were before the
        # pane took its size (80x24); a command reading them would not see the pane.
        line = f"env -u COLUMNS -u LINES {exports} {shlex.join(args)}; echo EXIT=$?; sleep 600"
        self.tmux("new-session", "-d", "-s", "run", "-x", str(self.width), "-y", str(self.height), line)
        # OSC 52 and title changes from the pane would land in tmux where a test can see them.
        self.tmux("set-option", "-g", "set-clipboard", "on")
        self.tmux("set-option", "-g", "history-limit", "5000")

    def screen(self) -> str:
        """The pane and its scrollback; wrapped lines joined."""
        return self.tmux("capture-pane", "-p", "-J", "-S", "-5000", "-t", "run")

    def wait_for(self, text: str, timeout: float = 180) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            assert time.monotonic() < deadline, f"{text!r} never appeared:\n{screen}"
            time.sleep(0.2)

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "run", *keys)

    def title(self) -> str:
        return self.tmux("display-message", "-p", "-t", "run", "#{pane_title}").strip()

    def buffers(self) -> str:
        return self.tmux("list-buffers")

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=30)


def run_in_pty(args: list[str], env: dict[str, str], *, columns: int = 300, timeout: float = 240) -> tuple[int, bytes]:
    """Run with stdout and stderr on a pseudo-terminal; every byte written to it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(args, env={**os.environ, **env, "TERM": "xterm-256color", "COLUMNS": str(columns)},
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    raw = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the other side closed
                    break
                if not chunk:
                    break
                raw += chunk
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=30), bytes(raw)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
