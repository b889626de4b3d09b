"""Multi-level stacks on real Ray actors (issue 17): SIGKILLed ranks recovered level by
level, answers equal bit for bit to the failure-free run."""
import pytest

import ftactors as ft

from .test_rs_backup import TOPOLOGY, assert_same, reference
from .test_stacks import PartnerStable, ThreeLevels, exhausted, levels

pytestmark = pytest.mark.ray


def run(cls, ranks, kills, tmp_path, **kw):
    return ft.run(cls, ranks=ranks, spares=2, transport="ray", kwargs={"iterations": 20},
                  chaos=ft.Chaos(kill=kills), timeout_s=300, checkpoint_interval=5,
                  checkpoint_storage="stable", checkpoint_dir=str(tmp_path / "stable"), **kw)


def test_partner_copies_then_the_global_set(ray_session, tmp_path):
    # rank 1 from its partner's copy; then ranks 0 and its partner 2: the stable set
    r = run(PartnerStable, 4, [(1, 4), (0, 12), ft.Kill(2, recovery_round=1)], tmp_path)
    assert_same(r.results, reference(ranks=4))
    assert levels(r) == ["standby", "ready_flush"] and exhausted(r) == ["standby"]


def test_three_levels_partner_copy_then_rs_decode(ray_session, tmp_path):
    # rank 3 from its partner's copy; then partners 2 and 6: the RS blocks
    r = run(ThreeLevels, 8, [(3, 5), (2, 11), ft.Kill(6, recovery_round=1)], tmp_path,
            **TOPOLOGY)
    assert_same(r.results, reference())
    assert levels(r) == ["standby", "rs"] and exhausted(r) == ["standby"]
    assert {rank for e in r.events_of("rs_decoded") for rank in e.detail["ranks"]} == {2, 6}
