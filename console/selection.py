"""Where a live list's cursor goes when its rows change: it stays on its item, not its row number.

A list redrawn while rows arrive (turns, events, errors) would otherwise leave its highlight
on a row *number* while the items slide under it, and ``enter`` would open what the operator
did not choose. :class:`ListCursor` keeps the selected item's key; :func:`reselect` finds that
item again in the new rows, or its nearest surviving neighbour, and counts the rows that arrived
on the newest side of it (the "▲ 3 new" hint). Following (``f``) is an explicit mode: the cursor
rides the newest row until the operator moves it. No Textual here: the widgets call this.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Reselection(Generic[K]):
    index: int | None
    """Where the cursor goes in the new rows (None: the list is empty)."""
    key: K | None
    """The item it is on."""
    arrived: frozenset[K]
    """Keys of the rows that arrived on the newest side of it (not in the old rows)."""


def reselect(
    old: Sequence[K],
    new: Sequence[K],
    selected: K | None,
    *,
    following: bool,
    newest_first: bool = True,
    newest: K | None = None,
) -> Reselection[K]:
    """The cursor's place in ``new`` (rows in display order) after ``old`` was shown.

    Following, it goes to ``newest`` (default: the first row, or the last when the list is
    oldest first). Otherwise it stays on ``selected``; if that item is gone, on the nearest
    item that was beside it (the older side first), else where the list starts.
    """
    if not new:
        return Reselection(None, None, frozenset())
    if following:
        target = newest if newest is not None and newest in new else new[0 if newest_first else -1]
        return Reselection(new.index(target), target, frozenset())
    positions = {key: i for i, key in enumerate(new)}
    key = selected if selected in positions else _neighbour(old, positions, selected, newest_first)
    if key is None:
        key = new[0 if newest_first else -1]
    index = positions[key]
    before = set(old)
    side = new[:index] if newest_first else new[index + 1 :]
    return Reselection(index, key, frozenset(k for k in side if k not in before))


def _neighbour(old: Sequence[K], present: dict[K, int], selected: K | None, newest_first: bool) -> K | None:
    """The item nearest ``selected`` in ``old`` that is still present: older side, then newer."""
    if selected is None or selected not in old:
        return None
    at = old.index(selected)
    older, newer = (
        (old[at + 1 :], reversed(old[:at])) if newest_first else (reversed(old[:at]), old[at + 1 :])
    )
    for side in (older, newer):
        for key in side:
            if key in present:
                return key
    return None


class ListCursor(Generic[K]):
    """One live list's cursor, by item: following the newest row, or staying on one item while
    the rows that arrive on the newest side of it are counted until the operator reaches them."""

    def __init__(self, *, newest_first: bool = True, following: bool = True) -> None:
        self.newest_first = newest_first
        self.following = following
        self.key: K | None = None
        self.index: int | None = None
        """Where the cursor was last put (its row in ``rows``)."""
        self.rows: tuple[K, ...] = ()
        self._unseen: set[K] = set()

    @property
    def new_count(self) -> int:
        """Rows that arrived on the newest side of the cursor and that it has not passed over."""
        return len(self._unseen)

    @property
    def glyph(self) -> str:
        """Which way the newest rows are: ``▲`` (newest first) or ``▼`` (a log, newest last)."""
        return "▲" if self.newest_first else "▼"

    def place(self, rows: Sequence[K], *, newest: K | None = None) -> int | None:
        """The rows now shown (display order) → the row the cursor goes to."""
        rows = tuple(rows)
        placed = reselect(
            self.rows, rows, self.key, following=self.following, newest_first=self.newest_first, newest=newest
        )
        self.rows, self.key, self.index = rows, placed.key, placed.index
        self._unseen = self._on_newest_side(self._unseen | placed.arrived)
        return placed.index

    def moved(self, index: int) -> None:
        """The operator put the cursor on row ``index``: it stays on that item, following ends."""
        if not 0 <= index < len(self.rows):
            return
        self.following = False
        self.key, self.index = self.rows[index], index
        self._unseen = self._on_newest_side(self._unseen)

    def follow(self, on: bool) -> None:
        """Follow the newest row (``place`` puts the cursor there), or stay where it is."""
        self.following = on
        if on:
            self._unseen.clear()

    def reset(self) -> None:
        """Other rows altogether (a new page, a new filter): start from the list's start."""
        self.key, self.index, self.rows = None, None, ()
        self._unseen.clear()

    def _on_newest_side(self, keys: set[K]) -> set[K]:
        if self.index is None or self.following:
            return set()
        side = self.rows[: self.index] if self.newest_first else self.rows[self.index + 1 :]
        return keys & set(side)
