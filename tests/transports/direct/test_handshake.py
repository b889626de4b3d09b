"""The handshake step by step (``transports/direct/handshake``): a listener's and a
client's machines joined over a fake connection, with the run's secret, without it,
cut anywhere, replayed, tampered with, timed out; mutants whose decisions the steps
catch."""
import pytest

from ftactors.transports.direct import handshake
from ftactors.transports.direct.handshake import (ANSWER_BYTES, NONCE_BYTES, PROOF_BYTES,
                                                  ClientHandshake, HandshakeError,
                                                  RunSecret, ServerHandshake, State)
from ftactors.transports.direct.wire import COUNT

SESSION = b"s" * handshake.SESSION_BYTES


def _run(client_secret, server_secret, count=7, shared=True, chunk=None, after=b""):
    """Both machines over a fake connection, ``chunk`` bytes at a time: what each
    decided (the listener's refusal or session, the client's verdict) and the bytes the
    client had left after the answer."""
    server = ServerHandshake(server_secret)
    client = ClientHandshake(client_secret, SESSION)

    def pieces(data):
        step = chunk or len(data) or 1
        return [data[i:i + step] for i in range(0, len(data), step)] or [b""]

    proof = None
    for piece in pieces(server.hello()):
        p, verdict, _ = client.receive(piece)
        assert verdict is None
        proof = proof or p
    assert proof is not None and len(proof) == PROOF_BYTES
    session = refusal = None
    for piece in pieces(proof):
        refusal, session, rest = server.receive(piece)
        if refusal or session:
            break
    if refusal is not None:
        return refusal, None, None
    assert session == SESSION and rest == b""
    answer = server.answer(count, shared)
    assert len(answer) == ANSWER_BYTES
    verdict = rest = None
    for piece in pieces(answer + after):
        _, v, r = client.receive(piece)
        verdict = verdict or v
        rest = (rest or b"") + r
    return session, verdict, rest


@pytest.mark.parametrize("chunk", [None, 1, 7, 31, 33])
def test_the_runs_peers_prove_themselves_to_each_other_in_any_cut(chunk):
    secret = RunSecret()
    session, verdict, rest = _run(secret, secret, count=7, shared=True, chunk=chunk,
                                  after=COUNT.pack(9))
    assert session == SESSION and verdict == (7, True) and rest == COUNT.pack(9)
    assert _run(secret, secret, count=0, shared=False)[1] == (0, False)


def test_a_client_without_the_secret_is_refused_at_its_proof():
    assert _run(RunSecret(), RunSecret()) == ("auth_failed", None, None)


def test_a_listener_without_the_secret_is_refused_at_its_answer():
    secret = RunSecret()
    server = ServerHandshake(RunSecret())  # a stranger listening where the rank was
    client = ClientHandshake(secret, SESSION)
    proof, _, _ = client.receive(server.hello())
    server.theirs = proof[:NONCE_BYTES + len(SESSION)]  # it cannot check, so it just answers
    server.state = State.CHECKED
    _, verdict, rest = client.receive(server.answer(0, True))
    assert verdict == "auth_failed" and rest == b"" and client.state is State.REFUSED


def test_a_proof_from_another_connection_does_not_pass():
    """The listener's nonce is in the MAC it checks: a recorded proof is worthless."""
    secret = RunSecret()
    first, second = ServerHandshake(secret), ServerHandshake(secret)
    proof, _, _ = ClientHandshake(secret, SESSION).receive(first.hello())
    assert first.receive(proof)[1] == SESSION
    assert second.receive(proof)[0] == "auth_failed"


def test_an_answer_cannot_pass_as_a_proof_nor_a_tampered_answer_as_an_answer():
    secret = RunSecret()
    server = ServerHandshake(secret)
    client = ClientHandshake(secret, SESSION)
    proof, _, _ = client.receive(server.hello())
    server.receive(proof)
    answer = server.answer(3, False)
    tampered = COUNT.pack(0) + answer[COUNT.size:]  # "resume from 0": would deliver twice
    assert client.receive(tampered)[1] == "auth_failed"
    # the listener's MAC over the client's nonce and session, offered as a proof to it
    reflected = ServerHandshake(secret)
    mac = answer[-handshake.MAC_BYTES:]
    assert reflected.receive(proof[:NONCE_BYTES + len(SESSION)] + mac)[0] == "auth_failed"


def test_a_proof_arrives_byte_by_byte_and_bytes_after_it_are_handed_back():
    secret = RunSecret()
    server = ServerHandshake(secret)
    proof, _, _ = ClientHandshake(secret, SESSION).receive(server.hello())
    for i in range(PROOF_BYTES - 1):
        assert server.receive(proof[i:i + 1]) == (None, None, b"")
        assert server.needs() == PROOF_BYTES - i - 1
    assert server.receive(proof[-1:] + b"frames") == (None, SESSION, b"frames")


def test_a_silent_or_vanished_connection_is_counted_by_what_it_did():
    secret = RunSecret()
    silent = ServerHandshake(secret)
    assert silent.timed_out() == "auth_timeout" and silent.state is State.REFUSED
    assert silent.lost() is None  # counted once
    gone = ServerHandshake(secret)
    gone.receive(b"x" * 10)  # part of a proof, then nothing: no proof was wrong
    assert gone.lost() == "handshake_lost"
    proven = ServerHandshake(secret)
    proof, _, _ = ClientHandshake(secret, SESSION).receive(proven.hello())
    proven.receive(proof)
    proven.answer(0, False)
    assert proven.timed_out() is None and proven.lost() is None


def test_a_step_outside_the_table_is_a_bug_in_the_glue():
    server = ServerHandshake(RunSecret())
    with pytest.raises(HandshakeError, match="no step from proof on answered"):
        server.answer(0, False)  # before any proof checked


@pytest.mark.parametrize("mutant", ["fixed_nonce", "any_proof", "shared_ignored"])
def test_mutants_of_the_handshakes_decisions_are_caught(monkeypatch, mutant):
    """Each mutant breaks one decision the steps above check (so they would fail): a
    listener that reuses its nonce accepts a recorded proof; one that takes any MAC
    lets a stranger in; a client that misreads "not shared" would use a segment the
    listener never mapped."""
    secret = RunSecret()
    if mutant == "fixed_nonce":
        monkeypatch.setattr(handshake.secrets, "token_bytes", lambda n: b"n" * n)
        first, second = ServerHandshake(secret), ServerHandshake(secret)
        proof, _, _ = ClientHandshake(secret, SESSION).receive(first.hello())
        assert second.receive(proof)[1] == SESSION  # the replay passes
    elif mutant == "any_proof":
        monkeypatch.setattr(handshake.hmac, "compare_digest", lambda a, b: True)
        assert _run(RunSecret(), RunSecret())[0] == SESSION  # the stranger is in
    else:
        monkeypatch.setattr(handshake, "SHARED", b"\x00")
        assert _run(secret, secret, shared=False)[1] == (7, True)  # a lie believed
