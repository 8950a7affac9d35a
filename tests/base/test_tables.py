"""Tables that fit the console (issue 35): every value shown whole, never cut; columns left out least important
first, and named, only when the table would not fit; the label column never left out."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from datatools.base.tables import fitted_table

words = st.text(alphabet="abcdefghij%.,()-", min_size=1, max_size=9)
labels = st.lists(words, min_size=1, max_size=4).map(" ".join)
numbers = st.integers(0, 10**9).map(lambda v: f"{v:,}")


def draw(table, width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False, color_system=None).print(table)
    return out.getvalue().splitlines()


def box_width(lines: list[str]) -> int:
    """Cells of the table's own lines (its borders), title and caption aside."""
    return max(cell_len(line) for line in lines if line[:1] in "┏┃┡│└")


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 9).flatmap(
        lambda ncols: st.tuples(
            st.lists(labels, min_size=ncols, max_size=ncols, unique=True),
            st.lists(st.tuples(labels, st.lists(numbers, min_size=ncols - 1, max_size=ncols - 1)), max_size=6),
            st.permutations(list(range(1, ncols))),
        )
    ),
    st.integers(30, 200),
)
def test_values_are_whole_and_columns_go_only_when_the_table_would_not_fit(drawn, width):
    headers, raw_rows, order = drawn
    rows = [[label, *values] for label, values in raw_rows]
    drop_first = [headers[j] for j in order]
    table, dropped = fitted_table("t", headers, rows, width, drop_first=drop_first)
    assert dropped == drop_first[: len(dropped)]  # least important first, in the order given
    lines = draw(table, 1000)  # a console wider than any table: the table's own widths decide
    for row in rows:  # every value of a shown column whole on one line, none cut
        for j, header in enumerate(headers[1:], 1):
            if header not in dropped:
                assert any(row[j] in line for line in lines), (row[j], lines)
    assert "…" not in "\n".join(lines)
    assert box_width(lines) <= width or dropped == drop_first  # it fits, or nothing more could go
    if dropped:  # the last column left out had to go: with it, the table is wider than the console
        kept, _ = fitted_table("t", headers, rows, width, drop_first=dropped[:-1])
        assert box_width(draw(kept, 1000)) > width


def test_the_first_column_is_never_left_out_and_bad_calls_are_refused():
    with pytest.raises(ValueError, match="'nope'"):
        fitted_table("t", ["a", "b"], [["x", "1"]], 80, drop_first=["nope"])
    with pytest.raises(ValueError, match="a row of 1 cells for 2 columns"):
        fitted_table("t", ["a", "b"], [["x"]], 80)
    with pytest.raises(ValueError, match="'a'"):
        fitted_table("t", ["a", "b"], [["x", "1"]], 80, drop_first=["a"])


def test_a_wide_console_shows_every_column_on_one_line_and_a_narrow_one_names_what_it_left_out():
    headers = ["strategy", "rows", "efficiency", "dropped tokens", "speed-up bound"]
    rows = [["optimal buckets [640, 768, 896, 1024]", "7,299", "89.42%", "47,536", "1.31x"]]
    wide, dropped = fitted_table("ctx 1,024", headers, rows, 160, drop_first=headers[:0:-1])
    lines = draw(wide, 160)
    assert dropped == [] and any(all(h in line for h in headers) for line in lines)  # headers unwrapped
    assert any("optimal buckets [640, 768, 896, 1024]" in line for line in lines)
    narrow, dropped = fitted_table("ctx 1,024", headers, rows, 40, drop_first=headers[:0:-1])
    lines = draw(narrow, 40)
    assert dropped == ["speed-up bound", "dropped tokens"]
    assert max(cell_len(line) for line in lines) <= 40
    assert "89.42%" in "\n".join(lines) and "7,299" in "\n".join(lines)
    assert "not shown at 40 columns: speed-up bound," in "\n".join(lines)
