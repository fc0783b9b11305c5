"""The trace store: turns, every event, attempts, breaker transitions and manifest versions in SQLite.

One file (``traces/traces.db`` by default) in WAL mode, so a console can read while the engine
writes. Writes happen off the engine's hot path: :class:`TraceRecorder` subscribes with a sink
that only appends to a deque, and a writer thread commits batches, one transaction each. With
``durability="turn"`` the recorder makes ``run_turn`` wait until the turn's events are committed,
and raise :class:`~engine.errors.TurnNotPersisted` when they cannot be.

Events are stored flat (:mod:`engine.store.codec`). Turn rows, the tools each turn touched and
the attempts table are derived in the same transaction as the events they come from: a batch is
all or nothing, so a crash never leaves a half-written turn (:mod:`engine.store.writes`).

Since schema 2 the store is also how a console reaches an engine in another process: it follows
the events as they are committed (:mod:`engine.store.follow`) and queues operator actions in
the ``commands`` table (:mod:`engine.store.command_queue`, applied by :mod:`engine.store.operator_commands`).
Since schema 3 it records who writes each turn, so turns left running by a process that is
gone are finished as ``interrupted`` (:mod:`engine.store.writers`). Since schema 6 it keeps the
operators' standing trips and disables across restarts (:mod:`engine.store.standing`) and tells one
engine's run from the next (``RecordingStarted``). Retention removes old turns
in small steps (:mod:`engine.store.retention`).

Opening never modifies a file it refuses (:mod:`engine.store.opening`).
"""

from engine.errors import TraceStoreError, TurnNotPersisted
from engine.store.codec import decode_event
from engine.store.command_auth import CommandKeyError
from engine.store.export import ExportRefused
from engine.store.failures import StoreWriteError
from engine.store.operator_commands import (
    RESERVED_ACTORS,
    Acknowledgement,
    CommandGuard,
    CommandTarget,
    apply_command,
    apply_pending_commands,
    operator_name,
    serve_operator_commands,
)
from engine.store.recorder import RecorderStats, TraceRecorder
from engine.store.retention import DEFAULT_MAX_AGE_S, DEFAULT_MAX_BYTES, RetentionPolicy
from engine.store.rows import (
    COMMAND_ACTIONS,
    AttemptRow,
    CommandAction,
    CommandRow,
    CommandStatus,
    StoredBreaker,
    StoredManifest,
    StoredTurn,
    StoreSnapshot,
    ToolState,
    TurnPage,
    TurnRow,
    WriterRow,
)
from engine.store.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, TABLES
from engine.store.standing import OverridePolicy, StandingOverride
from engine.store.store import DEFAULT_PATH, SYNCHRONOUS, TraceStore

__all__ = [
    "APPLICATION_ID",
    "COMMAND_ACTIONS",
    "DEFAULT_MAX_AGE_S",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_PATH",
    "MIGRATIONS",
    "RESERVED_ACTORS",
    "SCHEMA_VERSION",
    "SYNCHRONOUS",
    "TABLES",
    "Acknowledgement",
    "AttemptRow",
    "CommandAction",
    "CommandGuard",
    "CommandKeyError",
    "CommandRow",
    "CommandStatus",
    "CommandTarget",
    "ExportRefused",
    "OverridePolicy",
    "RecorderStats",
    "RetentionPolicy",
    "StandingOverride",
    "StoreSnapshot",
    "StoreWriteError",
    "StoredBreaker",
    "StoredManifest",
    "StoredTurn",
    "ToolState",
    "TraceRecorder",
    "TraceStore",
    "TraceStoreError",
    "TurnNotPersisted",
    "TurnPage",
    "TurnRow",
    "WriterRow",
    "apply_command",
    "apply_pending_commands",
    "decode_event",
    "operator_name",
    "serve_operator_commands",
]
