"""The reliable window step by step (``transports/direct/window``): a sender's frames
kept, acknowledged, resumed after a lost connection and dropped; a listener's
acknowledgements. A two-sided helper joins both over a fake connection that can be cut."""
import pytest

from ftactors.transports.direct.window import (ACK_BYTES, ACK_FRAMES, WINDOW_BYTES, WINDOW_FRAMES,
                                               Acks, SendWindow, Session)


class Pair:
    """A sender's window and a listener's session over a connection that may be cut:
    ``send`` keeps and writes, ``arrive`` delivers what was written, ``cut`` loses what
    is in flight, ``reconnect`` resumes as the handshake does."""

    def __init__(self):
        self.window = SendWindow()
        self.session = Session()
        self.acks = Acks(self.session)
        self.flight: list[int] = []  # frame numbers written, not yet read
        self.delivered: list[int] = []
        self.connected = True

    def send(self, nbytes=10):
        number = self.window.next
        self.window.push(number, nbytes)
        if self.connected:
            self.flight.append(number)

    def arrive(self, n=None):
        for number in self.flight[:n]:
            self.delivered.append(number)
            if self.acks.delivered(10):
                self.window.ack(self.acks.due())
        del self.flight[:n]

    def cut(self):
        self.flight.clear()
        self.connected = False
        self.window.lost()

    def reconnect(self) -> int:
        self.acks = Acks(self.session)  # a new connection, the same session
        resent = self.window.resume(self.session.count)
        self.flight.extend(self.window.frames)  # written again, in order
        self.connected = True
        return resent


def test_frames_are_kept_until_acknowledged_and_counted_by_their_bytes():
    w = SendWindow()
    for i in range(3):
        assert not w.push(("frame", i), 100 + i)
    assert (w.base, w.next, w.unacked) == (0, 3, 303)
    w.ack(2)
    assert (w.base, list(w.frames), w.unacked) == (2, [("frame", 2)], 102)
    w.ack(1)  # an older count changes nothing
    assert (w.base, w.unacked) == (2, 102)
    w.ack(3)
    assert (w.base, w.next, w.unacked, len(w.lengths)) == (3, 3, 0, 0)


def test_the_window_is_full_past_its_bytes_or_its_frames():
    w = SendWindow()
    assert not w.push("a", WINDOW_BYTES)  # at the bound: not yet
    assert w.push("b", 1) and w.full()
    w.ack(2)
    assert not w.full()
    for i in range(WINDOW_FRAMES):
        assert not w.push(i, 1)
    assert w.push("one more", 1) and w.full()


def test_a_lost_connection_loses_no_frame_and_delivers_none_twice():
    p = Pair()
    for _ in range(10):
        p.send()
    p.arrive(4)
    p.cut()  # frames 4-9 were in flight
    assert p.reconnect() == 6  # written before, written again
    p.arrive()
    assert p.delivered == list(range(10))
    assert p.window.resume(p.session.count) == 0  # another resume: nothing more


def test_a_connection_lost_twice_before_anything_arrives_resends_from_the_listeners_count():
    p = Pair()
    for _ in range(5):
        p.send()
    p.cut()
    p.reconnect()
    p.cut()
    for _ in range(2):  # queued while disconnected: never written before
        p.send()
    assert p.reconnect() == 5
    p.arrive()
    assert p.delivered == list(range(7))


def test_the_resume_point_acknowledges_what_was_delivered():
    p = Pair()
    for _ in range(6):
        p.send(1000)
    p.arrive(5)  # fewer than ACK_FRAMES: not acknowledged yet
    assert p.window.base == 0 and p.window.unacked == 6000
    p.cut()
    p.reconnect()
    assert p.window.base == 5 and p.window.unacked == 1000 and p.flight == [5]


def test_a_closed_channel_says_how_many_frames_were_never_written():
    w = SendWindow()
    for i in range(5):
        w.push(i, 1)
    w.ack(1)
    w.lost()  # 1-4 were written on the lost connection
    w.push(5, 1)
    w.push(6, 1)
    assert w.drop() == 2
    assert (len(w.frames), len(w.lengths), w.unacked) == (0, 0, 0)


def test_a_listener_acknowledges_every_quarter_window_of_frames_or_of_bytes():
    acks = Acks(Session())
    assert acks.due() is None  # nothing delivered
    due = [acks.delivered(1) for _ in range(ACK_FRAMES)]
    assert due == [False] * (ACK_FRAMES - 1) + [True]
    assert acks.due() == ACK_FRAMES and acks.due() is None
    assert not acks.delivered(ACK_BYTES - 1)
    assert acks.delivered(1)
    assert acks.due() == ACK_FRAMES + 2


def test_a_sessions_count_goes_on_across_connections():
    session = Session()
    first = Acks(session)
    first.delivered(5)
    second = Acks(session)  # a reconnection: the count is the session's
    second.delivered(5)
    assert second.due() == 2 and first.due() == 2


@pytest.mark.parametrize("mutant", ["resume_from_zero", "forget_lost", "ack_off_by_one"])
def test_the_pair_catches_a_wrong_resume(monkeypatch, mutant):
    """The window's decisions matter: each of these mutants loses or repeats a frame in
    the two-sided run above (so the tests would see it)."""
    if mutant == "resume_from_zero":
        monkeypatch.setattr(SendWindow, "resume", lambda self, count: 0)
    elif mutant == "forget_lost":
        monkeypatch.setattr(SendWindow, "lost", lambda self: None)
    else:
        real = SendWindow.ack
        monkeypatch.setattr(SendWindow, "ack", lambda self, count: real(self, count + 1))
    p = Pair()
    for _ in range(10):
        p.send()
    p.arrive(4)
    p.cut()
    resent = p.reconnect()
    p.arrive()
    assert p.delivered != list(range(10)) or resent != 6
