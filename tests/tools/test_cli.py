"""The ftactors command: every subcommand has --help; traces can be plotted."""
import pytest

import ftactors as ft
from ftactors.tools.cli import main

from .. import bodies as b


@pytest.mark.parametrize("argv", [[], ["run"], ["run", "cg"], ["demo"], ["bench"],
                                  ["bench", "transport"], ["bench", "recovery"], ["trace"],
                                  ["trace", "plot"]])
def test_help_everywhere(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv + ["--help"])
    assert info.value.code == 0
    assert "usage: ftactors" in capsys.readouterr().out


def test_trace_plot(tmp_path, capsys):
    trace, png = tmp_path / "run.parquet", tmp_path / "run.png"
    ft.run(b.Stacked, ranks=3, transport="local", trace=str(trace))
    assert main(["trace", "plot", str(trace), "-o", str(png)]) == 0
    assert png.stat().st_size > 5000 and "wrote" in capsys.readouterr().out


def test_trace_plot_bad_file_exit_2(tmp_path, capsys):
    assert main(["trace", "plot", str(tmp_path / "missing.parquet")]) == 2
    assert "missing.parquet" in capsys.readouterr().err
