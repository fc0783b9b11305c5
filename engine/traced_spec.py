"""A turn's spec as its trace holds it: what ``TurnStarted.spec`` records of the turn's calls.

The turn itself keeps its callers' values; the trace gets each call's arguments, default and own
idempotency key redacted under the call's tool's policy (:mod:`engine.redaction`), once per spec
even when a turn is run again.

Internal: the engine's machinery (:mod:`engine.runner` records it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.strategies.idempotency import keying

if TYPE_CHECKING:
    from engine.protocols import EngineForTurns
    from engine.redaction import RedactionPolicy

_TRACED: dict[int, tuple[dict[str, Any], tuple[RedactionPolicy, ...], dict[str, Any]]] = {}
"""Specs redacted lately, by id: a turn run again (its spec is built once) is redacted once. A few
only: keeping many new turns' specs alive costs more (measured) than redacting a spec again."""
_TRACED_MAX = 8
_TRACED_MAX_CALLS = 1000


def traced_spec(engine: EngineForTurns, spec: dict[str, Any]) -> dict[str, Any]:
    """A turn's spec as its ``TurnStarted`` holds it: each call's arguments and default redacted by
    its tool's policy (:meth:`Engine.redaction_for`), and its own idempotency key masked when the
    tool's keyed argument is a secret field. The same dict when nothing needed redacting."""
    if not engine.redaction.enabled:
        return spec
    known = _TRACED.get(id(spec))
    if known is not None and known[0] is spec and not known[1]:  # run before, and nothing to look at
        return spec
    # Most calls have nothing to look at; the others, under the policy in force for their tool.
    work = [
        (i, c, engine.redaction_for(c["tool"]))
        for i, c in enumerate(spec["calls"])
        if c["args"] or "default" in c or "idempotency_key" in c
    ]
    policies = tuple(policy for _, _, policy in work)
    if known is not None and known[0] is spec and known[1] == policies:
        return known[2]
    calls: list[dict[str, Any]] | None = None
    for i, call, policy in work:
        args = call["args"]
        traced = call
        redacted = policy.value(args)
        if redacted is not args:
            traced = {**call, "args": redacted}
        if "default" in call:
            default = policy.value(call["default"], policy.secrets_in(args))
            if default is not call["default"]:
                traced = {**traced, "default": default}
        if "idempotency_key" in call and _hides_key(engine, call["tool"], policy):  # a secret key
            traced = {**traced, "idempotency_key": policy.mask(call["idempotency_key"])}
        if traced is not call:
            if calls is None:
                calls = list(spec["calls"])
            calls[i] = traced
    result = spec if calls is None else {**spec, "calls": calls}
    if len(spec["calls"]) <= _TRACED_MAX_CALLS:  # a huge turn is not kept alive for a rerun
        if len(_TRACED) >= _TRACED_MAX:
            _TRACED.clear()
        _TRACED[id(spec)] = (spec, policies, result)  # the spec is held: its id is not reused meanwhile
    return result


def _hides_key(engine: EngineForTurns, tool_id: str, policy: RedactionPolicy) -> bool:
    """Whether ``tool_id`` is keyed under a secret field (its events show the key masked)."""
    options = keying(engine.manifest(tool_id).strategies) if tool_id in engine.tool_ids else None
    return options is not None and options.hides_key(policy)
