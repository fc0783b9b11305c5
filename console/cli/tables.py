"""Tables for the command line that stay readable in 80 columns and in a pipe.

Identifiers (turn, call and tool ids) are never wrapped nor cut: a copied id must be the id.
Free text (summaries, reasons) takes the room that is left, on lines of its own when there is
too little beside the identifiers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

GAP = "  "
NOTE_MIN = 32
"""Cells a free-text column needs beside the others; with fewer it goes below its row."""
NOTE_INDENT = 4


def cli_table(title: str | Text | None = None) -> Table:
    """The command line's table style: a rule under the header, no vertical lines to pay for."""
    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    justify: Literal["left", "right"] = "left"
    spare: str | None = None
    """How the value reads in the row's note (``"{} calls"``) when the row is too wide for the
    console with the column; None: the column always stays."""


def aligned_rows(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Text | str]],
    notes: Sequence[str],
    *,
    note_header: str,
) -> list[Text]:
    """Rows of short cells, each row on one line never wrapped nor cut, with a free-text note per row.

    The note is the last column when it has ``NOTE_MIN`` cells beside the others, wrapped in
    them; otherwise it goes on indented lines under its row. A row too wide for the console
    moves its spare columns into its note. Print the lines with ``soft_wrap=True`` so that a
    row still wider than the terminal stays one line.
    """
    cells = [[c if isinstance(c, Text) else Text(c) for c in row] for row in rows]
    if _row_width(columns, cells) > console.width and any(c.spare for c in columns):
        kept = [i for i, c in enumerate(columns) if not c.spare]
        notes = [_with_spares(columns, row, note) for row, note in zip(cells, notes, strict=True)]
        columns = [columns[i] for i in kept]
        cells = [[row[i] for i in kept] for row in cells]
    widths = [
        max([len(column.header), *(row[i].cell_len for row in cells)]) for i, column in enumerate(columns)
    ]
    fixed = sum(widths) + len(GAP) * (len(widths) - 1)
    beside = console.width - fixed - len(GAP)
    inline = beside >= NOTE_MIN
    header = _line([Text(c.header) for c in columns], widths, columns)
    if inline:
        header.append(GAP + note_header)
    header.stylize("bold")
    lines = [header, Text("─" * min(console.width, header.cell_len), style="dim")]
    for row, note in zip(cells, notes, strict=True):
        line = _line(row, widths, columns)
        wrapped = _wrap(console, note, beside if inline else max(console.width - NOTE_INDENT, NOTE_MIN))
        if inline:
            line.append(GAP)
            if wrapped:
                line.append_text(wrapped.pop(0))
            lines.append(line)
            lines += [Text(" " * (fixed + len(GAP))) + part for part in wrapped]
        else:
            lines.append(line)
            lines += [Text(" " * NOTE_INDENT) + part for part in wrapped]
    for line in lines:
        line.rstrip()
    return lines


def headed_lines(console: Console, heading: Text, text: str) -> list[Text]:
    """``heading`` (an id) then ``text`` on one line when it fits, else the text wrapped under it."""
    if not text:
        return [heading]
    if heading.cell_len + len(GAP) + Text(text).cell_len <= console.width:
        return [heading + Text(GAP + text)]
    return [
        heading,
        *(Text(" " * len(GAP)) + part for part in _wrap(console, text, console.width - len(GAP))),
    ]


def _row_width(columns: Sequence[Column], cells: Sequence[Sequence[Text]]) -> int:
    widths = [max([len(c.header), *(row[i].cell_len for row in cells)]) for i, c in enumerate(columns)]
    return sum(widths) + len(GAP) * (len(widths) - 1)


def _with_spares(columns: Sequence[Column], row: Sequence[Text], note: str) -> str:
    spares = ", ".join(c.spare.format(cell.plain) for c, cell in zip(columns, row, strict=True) if c.spare)
    return f"{spares} · {note}" if note else spares


def _line(cells: Sequence[Text], widths: Sequence[int], columns: Sequence[Column]) -> Text:
    line = Text()
    for i, (cell, width, column) in enumerate(zip(cells, widths, columns, strict=True)):
        pad = " " * (width - cell.cell_len)
        line.append_text(Text(pad) + cell if column.justify == "right" else cell + Text(pad))
        if i < len(widths) - 1:
            line.append(GAP)
    return line


def _wrap(console: Console, note: str, width: int) -> list[Text]:
    parts = list(Text(note).wrap(console, width)) if note else []
    for part in parts:
        part.rstrip()
    return parts


@dataclass(frozen=True, slots=True)
class TableColumn:
    """A column of a table that :func:`fitted_tables` may place in a table of its own."""

    header: str
    cells: Sequence[Text | str]
    justify: Literal["left", "right"] = "left"


def fitted_tables(
    console: Console, title: str | Text, key: TableColumn, columns: Sequence[TableColumn]
) -> list[Table]:
    """One table, or as many as it takes for each to fit the console's width, ``key`` in each.

    No column is wrapped: a table too wide for 80 columns would otherwise cut every header and
    value to an ellipsis.
    """
    groups: list[list[TableColumn]] = [[]]
    for column in columns:
        if groups[-1] and _width(console, [key, *groups[-1], column]) > console.width:
            groups.append([])
        groups[-1].append(column)
    tables = []
    for n, group in enumerate(groups):
        heading = title if len(groups) == 1 else Text.assemble(title, f" ({n + 1}/{len(groups)})")
        tables.append(_table(heading, [key, *group]))
    return tables


def _table(title: str | Text | None, columns: Sequence[TableColumn]) -> Table:
    table = cli_table(title)
    for column in columns:
        table.add_column(column.header, justify=column.justify, no_wrap=True)
    for row in zip(*(column.cells for column in columns), strict=True):
        table.add_row(*row)
    return table


def _width(console: Console, columns: Sequence[TableColumn]) -> int:
    unbounded = console.options.update_width(1_000_000)  # the width it wants, not the width it has
    return Measurement.get(console, unbounded, _table(None, columns)).maximum
