"""Idempotency keys: a side-effecting tool that takes a key may be re-sent after an ambiguous failure.

A ``side_effecting`` tool is never sent again after a failure that leaves its outcome unknown (a
timeout, a connection reset after the request went out): the first request may have booked the
flight. A tool whose service deduplicates requests by a key declares, in its manifest::

    idempotency: {key: idempotency_key}   # the argument the key is passed as
    idempotency: {key: context}           # or: the tool reads engine.idempotency_key()

and the engine gives each logical call one key — the same for every retry, hedge, alternative
(keyed too) and replay — so a re-send is recognised by the service and safe: the call may then be
retried after an ambiguous failure, the decision saying so. Only ``side_effecting`` tools may
have the section (a read-only or idempotent tool is re-sent anyway).

The key, in order of precedence: the call's context's (``CallContext.idempotency_key``, which a
turn's ``ToolCall.idempotency_key``, the LLM executor (the model's tool-call id) and the adapters
(the framework's tool-call id) set); the keyed argument's value when the caller passed one (for
``key: context``, the keyword ``idempotency_key`` of ``engine.call``/``try_call``, taken out of the
arguments); ``<turn id>:<call id>`` in a turn; else a UUID drawn from the engine's rng (a seeded
engine draws the same ones: do not let two runs of one seed reach a real service).

The key is passed as the named argument (a copy of the arguments: the caller's are never changed)
and, for either form, through :func:`engine.idempotency_key` while each attempt runs (an MCP
tool's request carries it in ``_meta``). It is announced as :class:`IdempotencyKeyAssigned` and
shown to a custom handler as ``FailureContext.idempotency_key``. A streaming tool finds it for
every chunk: :mod:`engine.streams` sets it again around each read (the generator then runs in
the consumer's task, outside any attempt) and as the stream closes.

A key under a secret field (the keyed argument — for ``key: context``, the caller's keyword —
is one under the tool's redaction policy, e.g. listed in the manifest's ``secret_fields``) is
masked wherever the engine writes it: the event, the retry's reason (the pipeline's
``Call.shown_key``), a turn's own key in ``TurnStarted.spec`` (:mod:`engine.traced_spec`), and
any error text, handler reason or recorded result quoting it (``Call.secret_key``). The tool
and a handler get it whole.

Counts (the strategy's facts, in ``engine.stats()`` and ``FailureContext.strategies``):
``keyed_calls``, and ``resends`` — attempts re-sent under a key after an ambiguous failure. The
strategy learns of one in two steps: ``attempt_failed`` marks a keyed call whose attempt failed
ambiguously, and the call's next attempt, when it is let through (``admit_now``, where the key
is set for it), is counted. Not at ``retry_refusal``: a retry consented to there may still be
refused before it is sent (the breaker opened during the backoff, a full bulkhead).
"""

from engine.strategies.idempotency.events import IdempotencyKeyAssigned
from engine.strategies.idempotency.keys import CALLER_KEYWORD, idempotency_key
from engine.strategies.idempotency.options import CONTEXT, IdempotencyOptions, keying
from engine.strategies.idempotency.strategy import IdempotencyStrategy

__all__ = [
    "CALLER_KEYWORD",
    "CONTEXT",
    "IdempotencyKeyAssigned",
    "IdempotencyOptions",
    "IdempotencyStrategy",
    "idempotency_key",
    "keying",
]
