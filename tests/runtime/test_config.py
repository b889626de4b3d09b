"""A run's settings as one value (``runtime/_config``): ``ft.run``, ``ft.run_async`` and
``ft.launch`` take the arguments of ``RunConfig.of`` and hand the value on whole."""
import dataclasses
import inspect

import pytest

import ftactors as ft
from ftactors._run import _prepare
from ftactors.runtime._config import RunConfig

from .. import bodies as b


@pytest.mark.parametrize("entry", [ft.run, ft.run_async, ft.launch],
                         ids=lambda f: f.__name__)
def test_the_entry_points_show_the_arguments_of_run_config(entry):
    shown = inspect.signature(entry).replace(return_annotation=inspect.Signature.empty)
    assert shown == inspect.signature(RunConfig.of, eval_str=True).replace(
        return_annotation=inspect.Signature.empty)
    assert "spares" in shown.parameters and "options" in shown.parameters


def test_a_config_is_made_once_and_frozen():
    chaos = ft.Chaos(kill=[(1, 2)], method="ray.kill")
    config = RunConfig.of(b.Ring, 3, args=[5], transport="local", chaos=chaos, seed=4,
                          heartbeat_timeout_s=2.0)
    assert (config.ranks, config.args, config.seed, config.transport) == (3, (5,), 4, "local")
    assert config.kills == (ft.Kill(1, iteration=2),) and config.kill_method == "ray.kill"
    assert config.options == {"heartbeat_timeout_s": 2.0}
    assert config.identity.fingerprint["ranks"] == 3 and config.restore is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.spares = 2


def test_without_chaos_nothing_is_struck():
    config = RunConfig.of(b.Ring, 2, transport="sim")
    assert (config.kills, config.kill_method, config.stall_s, config.job_lost_at,
            config.partitions) == ((), "sigkill", 0.0, None, ())


def test_the_coordinator_keeps_the_config_it_was_given():
    config = RunConfig.of(b.Ring, 2, args=(1,), transport="local", progress=False)
    c = _prepare(config).coordinator()
    assert c.config is config and c.n == 2 and c.rank_cls is b.Ring
    assert "progress" not in c.options and "progress" in config.options  # (its own copy)
    assert c.heartbeat_interval_s is None  # LocalFabric: no heartbeats by default


def test_restart_from_any_is_spent_on_finding_the_set():
    with pytest.raises(ft.ConfigError, match="restart_from_any=True needs restart_from"):
        RunConfig.of(b.Ring, 2, transport="local", restart_from_any=True)
