"""Whether a writer is heard from is decided in one place, from its heartbeat and its process, never
from the times of the events it wrote (issue 22 §2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine.liveness import Heard, judge
from engine.store import WriterRow
from engine.store.writers import HEARD_WITHIN_S, engine_heard, this_process

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("age_s", "alive", "closed", "gone_after_s", "expected"),
    [
        (0.0, None, False, None, "live"),
        (HEARD_WITHIN_S - 0.1, None, False, None, "live"),
        (HEARD_WITHIN_S, None, False, None, "stale"),
        (0.0, False, False, None, "gone"),  # its process ended: no need to wait for silence
        (HEARD_WITHIN_S * 10, True, False, None, "stale"),  # alive but silent: hung
        (30.0, None, False, 30.0, "gone"),
        (None, None, False, None, "never"),
        (1.0, False, True, None, "stopped"),
    ],
)
def test_judge(
    age_s: float | None, alive: bool | None, closed: bool, gone_after_s: float | None, expected: str
) -> None:
    status = judge(age_s, stale_after_s=HEARD_WITHIN_S, gone_after_s=gone_after_s, alive=alive, closed=closed)
    assert status == expected


def writer(
    id_: int, *, host: str | None = None, pid: int | None = None, key: str | None = None, beat: float = NOW,
    closed_at: float | None = None, found_gone: bool = False,
) -> WriterRow:  # fmt: skip
    me = this_process()
    return WriterRow(
        id_, host or me.host, me.pid if pid is None else pid, me.key if key is None else key, None, NOW - 100,
        beat, closed_at, found_gone,
    )  # fmt: skip


def ended_process() -> tuple[int, str | None]:
    """A pid of this machine whose process has ended, and a process key it could have had."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    machine = this_process().machine
    return child.pid, None if machine is None else f"{machine}/1"


def test_the_store_reader_judges_the_newest_live_writer_else_the_newest() -> None:
    assert engine_heard([], NOW) == Heard("never", None)
    assert engine_heard([writer(1, beat=NOW - 1)], NOW).status == "live"
    far = writer(1, host="elsewhere", key="other-boot:ns/1", beat=NOW - 60)
    assert engine_heard([far], NOW) == Heard("stale", 60.0, "elsewhere pid " + str(this_process().pid))
    pid, key = ended_process()
    gone = writer(2, pid=pid, key=key, beat=NOW)
    assert engine_heard([gone], NOW).status == "gone", "its pid ended: gone at once, beat or no beat"
    assert engine_heard([writer(1, closed_at=NOW - 5)], NOW) == Heard(
        "stopped", 5.0, gone.host + f" pid {this_process().pid}"
    )
    killed = writer(1, beat=NOW - 30, closed_at=NOW - 2, found_gone=True)  # closed by the next open
    assert engine_heard([killed], NOW) == Heard("gone", 30.0, killed.host + f" pid {this_process().pid}"), (
        "a crash reads as gone, silent since its last heartbeat, not as a close"
    )
    assert engine_heard([writer(1, beat=NOW), gone], NOW).status == "live", "a live writer decides"
    assert engine_heard([writer(1, closed_at=NOW - 9), gone], NOW).status == "gone", "else the newest"


def test_a_follower_measures_silence_itself() -> None:
    """Another host's clock may be ahead: its stamps would read as fresh for ever."""
    ahead = writer(1, host="elsewhere", key="other-boot:ns/1", beat=NOW + 3600)
    assert engine_heard([ahead], NOW).status == "live"
    assert engine_heard([ahead], NOW, ages={1: 60.0}).status == "stale"


def test_words_name_the_writer_and_say_what_is_known() -> None:
    assert Heard("gone", 12.0, "vm pid 7").words() == (
        "gone: vm pid 7 ended without closing the store (its last heartbeat 12 s ago)"
    )
    assert Heard("stale", 300.0, "vm pid 7").words() == "stale: no heartbeat from vm pid 7 for 5 min"
    assert Heard("never", None).words() == "never heard from: no heartbeat yet"
