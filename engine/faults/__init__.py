"""Deterministic fault injection: a YAML fault plan decides, attempt by attempt, what a tool does.

```yaml
fault_plan:
  name: demo outage
  steps:
    - match: {tool: flight_search}             # the tool's attempts in order, across its calls
      sequence:
        - {type: connection_reset}
        - {type: http_error, status_code: 503, headers: {Retry-After: "1"}}
        - {type: ok}                           # a success: the real tool runs
    - match: {tool: hotel_search, call: 2}     # only the tool's 2nd call, its attempts in order
      sequence: [{type: timeout, after_ms: 40000}]
      repeat: true                             # after the sequence ends, repeat its last step
    - match: {turn: plan-trip, call_id: hotels}  # one call of one turn, its attempts in order
      sequence: [{type: hang}]
  chaos:                                       # optional, for soak runs
    seed: 42
    rates: {connection_reset: 0.05, http_error: 0.02}
    defaults: {http_error: {status_code: 503}}
```

For every attempt the engine asks :meth:`FaultInjector.pick` with the ordinals it assigned
(the tool's call number, the attempt within the call, the turn and call id); nothing is
counted from timing, so the same plan fires the same faults on every run. The most specific
matching step wins (``turn`` + ``call_id`` + ``tool``, ``turn`` + ``call_id``, then ``tool``
+ ``call``, then ``tool``); only the winner's sequence advances. A ``{tool}`` step takes one
element per attempt in ``pick()`` order; the others index their sequence by attempt. Chaos
applies when no step matched or the matched sequence ran out without ``repeat``; each draw
is a hash of (seed, tool, call, attempt, turn, call id), so it does not depend on the order
in which concurrent calls are picked.

``pick()`` returns None when nothing applies (run the tool as usual) and an
:class:`OkFault` for an explicit ``{type: ok}`` step (``fault.is_ok``; it just runs the tool).

The engine awaits :meth:`BaseFault.run` inside the attempt's timeout scope in place of the
tool. Faults raise exceptions shaped like the real ones (class names, status codes, headers,
bodies), so they travel the same classification, retry, breaker and fallback paths.

The package: :mod:`~engine.faults.shapes` (exceptions shaped like the providers' own),
:mod:`~engine.faults.models` (the faults), :mod:`~engine.faults.plan` (the plan and its YAML
errors) and :mod:`~engine.faults.injector` (the injector and the protocols the engine uses).
"""

from engine.faults.injector import AttemptInjector, FaultInjector, FiredFault, InjectedAttempt, chaos_unit
from engine.faults.models import (
    CHAOS_FAULT_TYPES,
    FAULT_TYPES,
    BaseFault,
    ChaosFaultType,
    ConnectionResetFault,
    Fault,
    HangFault,
    HttpErrorFault,
    InvalidParametersFault,
    Invoke,
    LatencyFault,
    MalformedResponseFault,
    OkFault,
    PartialResponseFault,
    StreamError,
    StreamTruncateFault,
    TimeoutFault,
    ToolCallFault,
    ToolCallFaultMode,
    corrupt_tool_call,
)
from engine.faults.plan import (
    ChaosConfig,
    FaultPlan,
    FaultPlanError,
    FaultStep,
    MatchLevel,
    StepMatch,
    load_fault_plan,
)
from engine.faults.shapes import (
    INJECTED_ATTR,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    FaultResponse,
    Headers,
    InternalServerError,
    LengthFinishReasonError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RemoteProtocolError,
    UnprocessableEntityError,
)

__all__ = [
    "CHAOS_FAULT_TYPES",
    "FAULT_TYPES",
    "INJECTED_ATTR",
    "APIStatusError",
    "AttemptInjector",
    "AuthenticationError",
    "BadRequestError",
    "BaseFault",
    "ChaosConfig",
    "ChaosFaultType",
    "ConflictError",
    "ConnectionResetFault",
    "Fault",
    "FaultInjector",
    "FaultPlan",
    "FaultPlanError",
    "FaultResponse",
    "FaultStep",
    "FiredFault",
    "HangFault",
    "Headers",
    "HttpErrorFault",
    "InjectedAttempt",
    "InternalServerError",
    "InvalidParametersFault",
    "Invoke",
    "LatencyFault",
    "LengthFinishReasonError",
    "MalformedResponseFault",
    "MatchLevel",
    "NotFoundError",
    "OkFault",
    "PartialResponseFault",
    "PermissionDeniedError",
    "RateLimitError",
    "RemoteProtocolError",
    "StepMatch",
    "StreamError",
    "StreamTruncateFault",
    "TimeoutFault",
    "ToolCallFault",
    "ToolCallFaultMode",
    "UnprocessableEntityError",
    "chaos_unit",
    "corrupt_tool_call",
    "load_fault_plan",
]
