"""Options are declared once (``runtime/_options``): the site's options table is the one the
declarations make, and an option added to a protocol by a subclass alone is found by
validation, the command line, experiment files and the listing."""
import argparse
from pathlib import Path

import pytest

import ftactors as ft
from ftactors.protocols import PROTOCOLS, RSBackup
from ftactors.runtime._options import CORE_OPTIONS, Option, options_table
from ftactors.tools import cli
from ftactors.tools.experiment import experiment_from_dict

PAGE = Path(__file__).resolve().parents[2] / "docs/reference/options.md"
BEGIN, END = "<!-- options table: begin -->\n", "<!-- options table: end -->"


def test_the_site_holds_exactly_the_table_made_from_the_declarations(capsys):
    """After adding an option, ``ftactors options --markdown`` prints the new table."""
    assert cli.main(["options", "--markdown"]) == 0
    assert capsys.readouterr().out == options_table(PROTOCOLS)
    text = PAGE.read_text()
    assert text.count(BEGIN) == text.count(END) == 1
    assert text.split(BEGIN)[1].split(END)[0] == options_table(PROTOCOLS)


def test_help_of_run_lists_every_option_and_the_signatures_name_the_parameters():
    import inspect
    names = [o.name for o in CORE_OPTIONS] + [o.name for p in PROTOCOLS.values()
                                             for o in p.OPTIONS]
    for fn in (ft.run, ft.run_async):
        assert all(f"{name} (" in fn.__doc__ for name in names)
        assert "CORE_OPTIONS`)" not in fn.__doc__
    for fn in (ft.run, ft.run_async, ft.launch):
        params = inspect.signature(fn).parameters
        assert list(params)[:3] == ["rank_cls", "ranks", "args"] and "restart_from" in params
        assert params["transport"].default == "ray" and "options" in params


@pytest.mark.parametrize("option, text, value", [
    (Option("x", int, None, ""), "3", 3),
    (Option("x", (int, str), None, ""), "auto", "auto"),
    (Option("x", (float, dict), None, ""), "0=2.5", {0: 2.5}),
    (Option("x", dict, None, ""), "node@rs=60", {"node@rs": 60}),
    (Option("x", list, None, ""), "a,b", ["a", "b"]),
    (Option("x", list, None, ""), "[[0, 1], [2]]", [[0, 1], [2]]),
    (Option("x", str, "a", "", choices=("a", "b")), "b", "b"),
])
def test_a_value_from_the_command_line_takes_the_first_declared_type_that_reads_it(
        option, text, value):
    assert option.from_text(text) == value


def test_a_value_no_declared_type_reads_is_a_usage_error():
    with pytest.raises(argparse.ArgumentTypeError, match="takes KEY=VALUE, got 'standby:5'"):
        Option("x", dict, None, "").from_text("standby:5")
    with pytest.raises(argparse.ArgumentTypeError, match="one of a, b, got 'c'"):
        Option("x", str, "a", "", choices=("a", "b")).from_text("c")


@pytest.mark.parametrize("value, message", [
    (True, "must be of type int"), (2.5, "must be of type int"), ("3", "must be of type int")])
def test_a_value_of_another_type_is_refused_before_anything_starts(value, message):
    class R(RSBackup, ft.Rank):
        async def main(self):
            return 0
    with pytest.raises(ft.ConfigError, match=f"rs_interval {message}"):
        ft.run(R, 2, transport="local", rs_interval=value)


class Ring(ft.Rank):
    async def main(self):
        self.register("x", 0)
        async for _ in self.iterations(4):
            self.x += 1
        return self.x, self.options.get("rs_fancy_s")


class FancyRS(RSBackup):
    """A protocol refined in a test: one more option, declared here and nowhere else."""
    protocol_name = RSBackup.protocol_name  # refines rs (and stands for it in a stack)
    OPTIONS = (*RSBackup.OPTIONS,
               Option("rs_fancy_s", float, None, "a fancy new interval", "s"))


def test_an_option_added_by_a_subclass_is_found_everywhere(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(PROTOCOLS, "rs", FancyRS)
    # validation: taken with the protocol, typed, refused without it
    cls = type("FancyRing", (FancyRS, Ring), {})
    assert ft.run(cls, 2, transport="local", rs_fancy_s=0.5).results[0] == (4, 0.5)
    with pytest.raises(ft.ConfigError, match="rs_fancy_s must be of type float"):
        ft.run(cls, 2, transport="local", rs_fancy_s="soon")
    with pytest.raises(ft.ConfigError, match="unknown option.*rs_fancy_s"):
        ft.run(Ring, 2, transport="local", rs_fancy_s=0.5)
    # the command line: ftactors run and ftactors chaos take --rs-fancy-s
    parser = cli.build_parser()
    args = parser.parse_args(["run", "cg", "--protocol", "rs", "--rs-fancy-s", "0.25"])
    from ftactors.tools.apps_cli import _protocol_options
    assert _protocol_options(args) == {"rs_fancy_s": 0.25}
    args = parser.parse_args(["run", "cg", "--rs-fancy-s", "0.25"])
    with pytest.raises(ValueError, match="--rs-fancy-s needs rs in --protocol"):
        _protocol_options(args)
    args = parser.parse_args(["chaos", "--app", "cg", "--protocol", "rs", "--rs-fancy-s", "2",
                              "--transport", "local"])
    from ftactors.tools.experiment import experiment_from_flags
    exp = experiment_from_dict(experiment_from_flags(args), where="flags")
    assert exp.runs[0].options == {"rs_fancy_s": 2.0}
    # experiment files: a protocols: entry takes it as a key, checked
    data = {"transport": "local", "matrix": {"app": "cg", "protocol": "fancy", "ranks": 4,
                                             "schedule": "none"},
            "protocols": {"fancy": {"protocol": "rs", "rs_fancy_s": 3}},
            "schedules": {"none": {}}}
    assert experiment_from_dict(data).runs[0].options == {"rs_fancy_s": 3}
    data["protocols"]["fancy"]["rs_fancy_s"] = "later"
    with pytest.raises(ValueError, match="rs_fancy_s must be of type float"):
        experiment_from_dict(data)
    # the listing
    assert cli.main(["options", "rs"]) == 0
    out = capsys.readouterr().out
    assert "rs_fancy_s (float, s; default None; rs):\n    a fancy new interval" in out


def test_the_listing_of_a_stack_shows_its_protocols_options_only(capsys):
    assert cli.main(["options", "standby+ready-flush"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint_interval (int | str, iterations; default None; ready-flush (interval))" in out
    assert "backup_interval (" in out and "rs_interval (" not in out and "heartbeat_timeout_s" in out
    assert cli.main(["options", "ready-flush+groups"]) == 2
    assert "a stack takes one consistency protocol" in capsys.readouterr().err


def test_a_name_declared_twice_is_refused():
    class Shadow(RSBackup):
        protocol_name = RSBackup.protocol_name
        OPTIONS = (*RSBackup.OPTIONS, Option("progress", int, 0, "a second meaning"))

    class R(Shadow, ft.Rank):
        async def main(self):
            return 0
    with pytest.raises(TypeError, match="Shadow declares option 'progress', which the core "
                                        "declares too"):
        ft.run(R, 2, transport="local")


@pytest.mark.parametrize("name, options", [
    ("standby", {"backup_interval": 0}),
    ("ready-flush", {"checkpoint_interval": 0}),
    ("groups", {"group_checkpoint_interval": {0: 0}}),
    ("hc3i", {"gc_clcs_max": 0}),
    ("rs", {"rs_interval_s": -1}),
])
def test_each_protocol_checks_its_own_settings_at_the_door(name, options):
    """What the declared types let through but the protocol refuses (a value out of
    range) is refused by the protocol's ``check_options``, which ``ft.run`` calls before
    anything starts (RSBackup's was once misnamed, and only its coordinator caught it)."""
    with pytest.raises(ft.ConfigError):
        PROTOCOLS[name].check_options(options)
