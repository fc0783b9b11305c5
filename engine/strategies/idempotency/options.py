"""Internal: the ``idempotency`` manifest section. Import it from :mod:`engine.strategies.idempotency`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from engine.strategies.base import StrategyOptions
from engine.strategies.idempotency.keys import CALLER_KEYWORD

if TYPE_CHECKING:
    from engine.redaction import RedactionPolicy

CONTEXT = "context"
"""``key: context``: the tool reads its key with :func:`engine.idempotency_key` instead of an argument."""


class IdempotencyOptions(StrategyOptions):
    """How a side-effecting tool receives its call's idempotency key."""

    key: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^\S+$")]
    """The name of the argument the key is passed as, or ``context``: the tool reads it with
    :func:`engine.idempotency_key` (an MCP tool's request carries it in ``_meta``)."""

    @property
    def argument(self) -> str | None:
        """The argument the key is passed as, or None when the tool reads it from the context."""
        return None if self.key == CONTEXT else self.key

    def hides_key(self, policy: RedactionPolicy) -> bool:
        """Whether the key is a secret under ``policy`` (the tool's: the engine's, extended by the
        manifest's ``secret_fields``): its keyed argument — for ``key: context``, the caller's
        keyword ``idempotency_key`` — is a secret field. Events then show it masked."""
        return policy.enabled and policy.is_secret_field(self.argument or CALLER_KEYWORD)


def keying(strategies: Mapping[str, StrategyOptions]) -> IdempotencyOptions | None:
    """A manifest's ``idempotency`` section (from its ``strategies``), or None: the tool is not keyed."""
    options = strategies.get("idempotency")
    return options if isinstance(options, IdempotencyOptions) else None
