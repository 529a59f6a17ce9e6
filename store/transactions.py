"""What the modules below ``store.store`` need of a store: its transactions.
Protocols, so that they need not import ``store.store``, which imports them
(``store.store.Store`` is both)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from sqlalchemy import Connection


class Writable(Protocol):
    """One write transaction at a time."""

    def write(self) -> AbstractContextManager[Connection]: ...


class Readable(Protocol):
    """A read transaction."""

    def read(self) -> AbstractContextManager[Connection]: ...


class Transactional(Readable, Writable, Protocol):
    """Both."""
