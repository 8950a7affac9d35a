"""Report tables that fit the console: whole values, columns left out (least important first) when too narrow.

rich shrinks a too-wide table by cutting its cells (``68.5…``); :func:`fitted_table` instead leaves out the column
the caller ranks least important, saying which in the caption (every value is in ``--json``).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

LABEL_MIN = 12  # cells of the first (label) column at least, wrapped at its spaces below its widest label


def _cells(text: str) -> int:
    return Text.from_markup(text).cell_len


def _longest_word(text: str) -> int:
    return max((_cells(w) for w in Text.from_markup(text).plain.split()), default=0)


def table_width(needs: Sequence[int]) -> int:
    """Cells of a rich table (default box, padding 1 each side) whose columns hold ``needs`` cells of content."""
    return sum(needs) + 2 * len(needs) + len(needs) + 1


def fitted_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    drop_first: Sequence[str] = (),
) -> tuple[Table, list[str]]:
    """A rich table of ``rows`` (cells: rich markup) under ``columns`` (the first a label that may wrap, the others
    right-aligned, never cut) at most ``width`` cells wide: while it is wider, the next column of ``drop_first``
    (headers, least important first) is left out. Returns the table and the headers left out (named in its caption).

    Raises:
      ValueError: a row whose length is not the number of columns, or a ``drop_first`` header that is not a column.
    """
    columns = list(columns)
    unknown = [c for c in drop_first if c not in columns[1:]]
    if unknown:
        raise ValueError(f"drop_first names {unknown[0]!r}, not one of the columns {columns[1:]}")
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"a row of {len(row)} cells for {len(columns)} columns: {list(row)!r}")
    widest_label = max([_cells(row[0]) for row in rows] + [_cells(columns[0])])
    values = [max((_cells(row[j]) for row in rows), default=0) for j in range(len(columns))]
    full = [widest_label] + [max(v, _cells(h)) for v, h in zip(values[1:], columns[1:])]
    if table_width(full) <= width:  # everything on one line each, as rich would draw it
        return _table(title, columns, rows, full, list(range(len(columns))), None), []
    label_need = max(min(widest_label, LABEL_MIN), max((_longest_word(row[0]) for row in rows), default=0))
    needs = [max(label_need, _longest_word(columns[0]))]  # headers wrap at their spaces
    needs += [max(v, _longest_word(h)) for v, h in zip(values[1:], columns[1:])]
    shown = list(range(len(columns)))
    dropped: list[str] = []
    for header in drop_first:
        if table_width([needs[j] for j in shown]) <= width:
            break
        shown.remove(columns.index(header))
        dropped.append(header)
    spare = width - table_width([needs[j] for j in shown])  # the label takes what is left, up to its widest
    needs[0] = max(needs[0], min(widest_label, needs[0] + spare))
    caption = f"not shown at {width} columns: {', '.join(dropped)} (every value: --json)" if dropped else None
    return _table(title, columns, rows, needs, shown, caption), dropped


def _table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    widths: Sequence[int],
    shown: Sequence[int],
    caption: str | None,
) -> Table:
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for j in shown:  # each column exactly its width: the table is table_width() wide, no value cut
        if j == 0:
            table.add_column(columns[j], justify="left", width=widths[j], overflow="fold")
        else:
            table.add_column(columns[j], justify="right", width=widths[j])
    for row in rows:
        table.add_row(*(row[j] for j in shown))
    return table
