"""The composition table of the site (docs/reference/options.md) is the one the roles in
the code make, so it stays true; the stacks it lists as working are the ones the
framework takes."""
from pathlib import Path

import pytest

from ftactors.protocols import PROTOCOLS
from ftactors.runtime._protocol import composition_table, stack_refusal, working_stacks

PAGE = Path(__file__).resolve().parents[2] / "docs/reference/options.md"
BEGIN, END = "<!-- composition table: begin -->\n", "<!-- composition table: end -->"


def test_the_site_holds_exactly_the_table_made_from_the_roles():
    text = PAGE.read_text()
    assert text.count(BEGIN) == text.count(END) == 1
    shown = text.split(BEGIN)[1].split(END)[0]
    assert shown == composition_table(PROTOCOLS)


def test_the_working_stacks_are_the_ones_issue_17_built():
    assert working_stacks(PROTOCOLS) == [
        ["rs", "standby"], ["rs", "ready-flush"], ["rs", "groups"], ["rs", "hc3i"],
        ["standby", "ready-flush"], ["standby", "groups"], ["standby", "hc3i"],
        ["rs", "standby", "ready-flush"], ["rs", "standby", "groups"],
        ["rs", "standby", "hc3i"]]


@pytest.mark.parametrize("a", sorted(PROTOCOLS))
@pytest.mark.parametrize("b", sorted(PROTOCOLS))
def test_each_pair_cell_says_what_check_stack_does(a, b):
    table = composition_table(PROTOCOLS)
    row = next(line for line in table.splitlines() if line.startswith(f"| `{a}` |"))
    cell = row.split(" | ")[1 + list(PROTOCOLS).index(b)].strip(" |")
    if a == b:
        assert cell == ""
        return
    takes = [order for order in ((a, b), (b, a))
             if stack_refusal(PROTOCOLS[n] for n in order) is None]
    if takes:
        assert cell == f"`{'+'.join(takes[0])}`" and len(takes) == 1
    else:
        assert cell.startswith(("no: one ", "not built yet")), cell
