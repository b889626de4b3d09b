"""A traceback of user code shipped by value shows the user's file names, lines and
source, on Ray as on local: here a "notebook cell", code whose file no worker can read
(its source is only in the driver's linecache, as IPython keeps cells)."""
import linecache
import sys
import types

import pytest

import ftactors as ft

CELL = "<notebook-cell-7>"
SOURCE = '''import ftactors as ft


class Cell(ft.Rank):
    async def main(self):
        if self.rank == 1:
            fail_in_the_cell(self.rank)
        return self.rank


def fail_in_the_cell(rank):
    raise ValueError(f"rank {rank} stops in the cell")
'''


@pytest.fixture
def cell_module():
    """A module made from a cell's source, importable nowhere (shipped by value)."""
    linecache.cache[CELL] = (len(SOURCE), None, SOURCE.splitlines(True), CELL)
    mod = types.ModuleType("ftactors_test_notebook")
    sys.modules[mod.__name__] = mod
    exec(compile(SOURCE, CELL, "exec"), mod.__dict__)
    yield mod
    del sys.modules[mod.__name__]
    linecache.cache.pop(CELL, None)


@pytest.mark.parametrize("transport", ["local", "ray"])
def test_a_traceback_shows_the_users_file_lines_and_source(cell_module, transport, request):
    if transport == "ray":
        request.getfixturevalue("ray_session")
    with pytest.raises(ft.RankError) as info:
        ft.run(cell_module.Cell, ranks=2, transport=transport, timeout_s=120)
    tb = info.value.remote_traceback
    assert (f'  File "{CELL}", line 7, in main\n'
            f'    fail_in_the_cell(self.rank)\n') in tb
    assert (f'  File "{CELL}", line 12, in fail_in_the_cell\n'
            f'    raise ValueError(f"rank {{rank}} stops in the cell")\n') in tb
