"""``with`` for the project's objects that hold a client or a file until ``close()``."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """A base for a class whose ``close()`` releases what it holds: ``with`` closes it,
    however the block ends."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
