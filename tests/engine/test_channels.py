"""The channel rules as a plain class: FIFO, exactly-once, incarnations."""
from ftactors.engine._channels import InChannels, OutChannels
from ftactors.engine._envelope import APP, Envelope
from ftactors.engine._payload import pack


def env(src, seq, src_epoch=0, dst_epoch=0):
    e = Envelope(APP, src, 9, "w", 0, seq, pack(None))
    e.seq, e.src_epoch, e.dst_epoch = seq, src_epoch, dst_epoch
    return e


def seqs(envs):
    return [e.seq for e in envs]


def test_reorders_and_drops_duplicates():
    ch = InChannels()
    assert seqs(ch.accept(env(0, 2))) == []
    assert seqs(ch.accept(env(0, 1))) == []
    assert seqs(ch.accept(env(0, 0))) == [0, 1, 2]
    assert ch.accept(env(0, 1)) == [] and ch.accept(env(0, 2)) == []
    ch.accept(env(0, 4))
    assert ch.accept(env(0, 4)) == []  # a duplicate of an early one
    assert ch.duplicates == 3
    assert seqs(ch.accept(env(1, 0))) == [0]  # another sender, its own channel


def test_newer_sender_incarnation_opens_a_fresh_channel_and_older_is_stale():
    ch = InChannels()
    ch.accept(env(0, 0))
    ch.accept(env(0, 2))                          # early, from incarnation 0
    assert seqs(ch.accept(env(0, 0, src_epoch=3))) == [0]  # incarnation 3 restarts at 0
    assert ch.accept(env(0, 1, src_epoch=0)) == []         # incarnation 0 is stale now
    assert ch.stale == 1
    ch.peer_epoch(0, 5)                           # told of a newer one before it speaks
    assert ch.accept(env(0, 1, src_epoch=3)) == [] and ch.stale == 2


def test_traffic_for_a_future_incarnation_of_this_rank_waits_for_it():
    ch = InChannels(my_epoch=0)
    assert ch.accept(env(0, 0, dst_epoch=2)) == []   # a peer already knows our next life
    assert ch.accept(env(0, 1, dst_epoch=0)) == []   # old channel: seq 1 is early
    assert seqs(ch.new_epoch(2)) == [0]              # released once we become epoch 2
    assert ch.accept(env(0, 5, dst_epoch=0)) == [] and ch.stale == 1  # our old life's mail


def test_sender_counts_per_destination_incarnation():
    out = OutChannels()
    a = [out.stamp(Envelope(APP, 0, 1, "w", 0, 0, pack(None)), 0, 0).seq for _ in range(3)]
    b = out.stamp(Envelope(APP, 0, 1, "w", 0, 0, pack(None)), 0, 4).seq
    c = out.stamp(Envelope(APP, 0, 2, "w", 0, 0, pack(None)), 0, 0).seq
    assert (a, b, c) == ([0, 1, 2], 0, 0)
