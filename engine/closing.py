"""``with`` for the things that have a ``close()``: the trace recorder, the exporters.

Internal: the engine's machinery, no public names.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self


class ClosedOnExit:
    """``with`` closes it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


__all__ = ["ClosedOnExit"]
