"""A rank's parts waiting for the coordinator (``protocols/shared/parts.HeldParts``)."""
import asyncio

import pytest

from ftactors.protocols.shared.parts import HeldParts


def test_a_confirmed_part_can_be_taken_again_until_the_coordinator_keeps_it():
    """ReadyMessageFlush's recovery salvages parts while the take under way may already
    have had its answer: the second take gets the same bytes, not a KeyError that ended
    the recovery (seen on Ray with warm spares)."""
    async def scenario():
        parts = HeldParts(confirmed=True)
        taken = parts.hold((0, 3), b"part")
        assert parts.give((0, 3)) == b"part" and not taken.done()
        assert parts.give((0, 3)) == b"part" and parts.keys() == []
        parts.kept((0, 3))
        assert taken.done()
        with pytest.raises(KeyError):
            parts.give((0, 3))  # kept: the coordinator has it and never asks again
    asyncio.run(scenario())


def test_an_unconfirmed_part_is_done_when_given():
    async def scenario():
        parts = HeldParts()
        taken = parts.hold("k", b"x")
        assert parts.give("k") == b"x" and taken.done()
    asyncio.run(scenario())
