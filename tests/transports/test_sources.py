"""A traceback of user code shipped by value shows the user's file names, lines and
source, on Ray as on local: here a "notebook cell", code whose file no worker can read
(its source is only in the driver's linecache, as IPython keeps cells)."""
import linecache
import subprocess
import sys
import types

import cloudpickle
import pytest

import ftactors as ft
from ftactors.transports.ray import by_value

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


def test_code_shipped_by_value_keeps_its_file_names(cell_module):
    """What the Ray traceback needs, without Ray: the class and the function it calls,
    pickled by value as a rank's spec is, come back in another process (where the
    cell's module does not exist) with the cell's file name and line numbers
    (cloudpickle 3.1.3 alone writes ``<dynamic-code>``), and still run."""
    cloudpickle.register_pickle_by_value(cell_module)
    try:
        blob = by_value.dumps((cell_module.Cell, cell_module.fail_in_the_cell))
    finally:
        cloudpickle.unregister_pickle_by_value(cell_module)
    elsewhere = (
        "import pickle, sys, traceback\n"
        "cls, fn = pickle.loads(sys.stdin.buffer.read())\n"
        "assert 'ftactors_test_notebook' not in sys.modules\n"
        "print(cls.main.__code__.co_filename, cls.main.__code__.co_firstlineno)\n"
        "try:\n"
        "    fn(3)\n"
        "except ValueError as exc:\n"
        "    frame = traceback.extract_tb(exc.__traceback__)[-1]\n"
        "    print(frame.filename, frame.lineno, exc)\n")
    out = subprocess.run([sys.executable, "-c", elsewhere], input=blob, capture_output=True,
                         check=True).stdout.decode().splitlines()
    assert out == [f"{CELL} 5", f"{CELL} 12 rank 3 stops in the cell"]
