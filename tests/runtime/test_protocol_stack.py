"""The protocol-mixin stack: composition, and hooks that see every message."""
import pytest

import ftactors as ft

from .. import bodies as b


def test_two_mixins_see_every_message_including_collectives(transport):
    n = 4
    res = ft.run(b.Stacked, ranks=n, transport=transport, timeout_s=120).results
    total_sent = sum(r["counting"]["sent"] for r in res)
    total_received = sum(r["counting"]["received"] for r in res)
    assert total_sent == total_received > n  # collectives' inner messages are counted
    for r in res:
        # both mixins saw exactly the messages the engine numbered
        assert r["counting"]["sent"] == sum(r["app_sent"]) == r["piggyback"]["next"]
        assert r["counting"]["received"] == sum(r["app_received"]) == r["piggyback"]["seen"]
        assert r["piggyback"]["out_of_order"] == 0  # FIFO per sender, piggyback intact
        assert r["total"] == sum(range(n)) and r["everyone"] == list(range(n))
        contexts = r["counting"]["contexts"]
        assert "w" in contexts and "w/c" in contexts  # p2p and collective contexts
        assert any(c.startswith("w.") and c.endswith("/c") for c in contexts)  # split comm


def test_stack_order_follows_the_mro():
    assert ft.Protocol in b.Stacked.__mro__
    names = [k.protocol_name for k in b.Stacked.__mro__ if k.__dict__.get("protocol_name")]
    assert names == ["counting", "piggyback"]


def test_conflicting_mixins_fail_at_class_creation():
    with pytest.raises(TypeError, match="'conflicting' cannot be combined with 'counting'"):
        type("Bad", (b.Conflicting, b.Counting, ft.Rank), {})


def test_missing_required_mixin_fails_when_the_stack_meets_a_rank():
    type("Partial", (b.NeedsCounting,), {})  # a mixin on its own is fine
    with pytest.raises(TypeError, match="'needs-counting' needs 'counting'"):
        type("Bad", (b.NeedsCounting, ft.Rank), {})
    type("Good", (b.NeedsCounting, b.Counting, ft.Rank), {"main": b.Ring.main})


def test_refining_a_protocol_is_not_a_duplicate_but_a_namesake_is():
    class Refined(b.Counting):
        protocol_name = "counting"
    cls = type("Fine", (Refined, ft.Rank), {"main": b.Ring.main})
    assert [k.protocol_name for k in ft.runtime._protocol.protocol_classes(cls)] == ["counting"]

    class Namesake(ft.Protocol):
        protocol_name = "counting"
    with pytest.raises(TypeError, match="two different protocols are named 'counting'"):
        type("Bad", (Namesake, b.Counting, ft.Rank), {})


def test_protocols_can_hold_and_release_messages_in_order(transport):
    (held, probe_before), (got, opened) = ft.run(
        b.Gated, ranks=2, transport=transport, timeout_s=120).results
    assert held == 5 and probe_before is False
    assert got == [0, 1, 2, 3, 4] and opened  # released after the control message, in order
