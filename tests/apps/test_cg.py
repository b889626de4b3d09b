"""The distributed NPB CG app: official zeta, bit-identity with the serial kernel on one
rank, the same numbers on every transport and run, and bad input."""
import pytest

import ftactors as ft
from ftactors.apps import _npb_cg as npb
from ftactors.apps.cg import CG
from ftactors.protocols import StandbyReplacement


def run_cg(problem_class, ranks, transport="local"):
    return ft.run(CG, ranks=ranks, kwargs={"problem_class": problem_class},
                  transport=transport, timeout_s=300).results


def check_official(results, problem_class):
    cls = npb.CG_CLASSES[problem_class]
    for r in results:
        assert r["verified"] is True
        assert r["iterations"] == cls.niter == len(r["zetas"]) == len(r["rnorms"])
        assert r["zeta"] == r["zetas"][-1]
        assert abs(r["zeta"] - cls.zeta_verify) / cls.zeta_verify <= 1e-10
        assert r["zetas"] == results[0]["zetas"], "every rank reports the same zetas"
    assert sum(r["rows"][1] - r["rows"][0] for r in results) == cls.na


def test_one_rank_is_bit_identical_to_the_serial_kernel():
    serial = npb.cg_serial("S")
    (r,) = run_cg("S", 1)
    assert r["zetas"] == serial["zetas"]
    assert r["rnorms"] == serial["rnorms"]
    check_official([r], "S")


def test_class_s_on_several_rank_counts_and_transports_is_deterministic():
    runs = {(t, n): run_cg("S", n, t) for t, n in
            [("local", 2), ("local", 3), ("local", 4), ("sim", 4)]}
    for results in runs.values():
        check_official(results, "S")
    # same rank count, same arithmetic, whatever the transport or the arrival order
    assert runs["sim", 4][0]["zetas"] == runs["local", 4][0]["zetas"]
    # the NPB 3.3.1 trace of class S (yeominstall/gomguk: cg.S.x), first iterations
    for got, npb_log in zip(runs["local", 3][0]["zetas"], [9.9986441579140, 8.5733279203222]):
        assert abs(got - npb_log) <= 1e-12


def test_class_w():
    check_official(run_cg("W", 2), "W")


@pytest.mark.slow
def test_class_a():
    check_official(run_cg("A", 4), "A")


def test_class_s_on_ray(ray_session):
    check_official(run_cg("S", 2, "ray"), "S")


def test_unknown_class_is_an_error_in_main():
    with pytest.raises(ft.RankError, match="unknown NPB CG class 'Z'"):
        run_cg("Z", 1)


class FTCG(StandbyReplacement, CG):
    """CG with a protocol mixed in, and no change to CG."""

    backup_interval = 3


def test_recovers_bit_identically_under_a_protocol():
    plain = run_cg("S", 4)
    r = ft.run(FTCG, ranks=4, spares=1, transport="local", kwargs={"problem_class": "S"},
               chaos=ft.Chaos(kill=[(2, 7)]), timeout_s=120)
    assert r.events_of("restored")
    assert [o["zetas"] for o in r.results] == [o["zetas"] for o in plain]
