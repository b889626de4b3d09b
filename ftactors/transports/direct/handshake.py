"""The direct plane's handshake: how the two ends of a connection prove they belong to
the run before a single frame byte is read, as two small machines with no I/O.

Theory of operation
-------------------
The run's secret (``RunSecret``) is made by the driver and handed to ranks at start,
never printed. A connection is one-way (the connecting rank sends frames), and before
anything else:

1. the listener sends a random nonce (``ServerHandshake.hello``);
2. the client answers with its own nonce, its channel's session id and an HMAC-SHA256
   over them and the listener's nonce (``ClientHandshake.receive`` returns the proof);
3. the listener checks it (``ServerHandshake.receive``): a wrong proof refuses the
   connection as ``auth_failed``, and nothing after it is read; a right one names the
   session, and the listener answers with how many frames of that session it has
   delivered and whether it took the shared-memory segment passed with the proof, and
   an HMAC over all of it in the other order (``ServerHandshake.answer``);
4. the client checks that answer (``ClientHandshake.receive``), so it too knows it
   reached the run's rank before it sends any frame; a wrong answer is ``auth_failed``
   on its side.

Each role's own nonce is in every MAC it checks, so no proof or answer can be replayed
from another connection, and the role names (``client``/``server``) keep an answer from
passing as a proof. A connection that proves nothing within ``AUTH_TIMEOUT_S``
(``timed_out``) is refused as ``auth_timeout``; one that hangs up before its proof is
whole (``lost``) as ``handshake_lost``, which says nothing of the peer's secret. The
machines' steps are the literal tables ``SERVER`` and ``CLIENT``; an input not in a
table is a ``HandshakeError`` (a bug in the glue, never the peer's doing).
"""
from __future__ import annotations

import enum
import hashlib
import hmac
import secrets

from .wire import COUNT

NONCE_BYTES = 32
SESSION_BYTES = 16
MAC_BYTES = 32
PROOF_BYTES = NONCE_BYTES + SESSION_BYTES + MAC_BYTES
"""The client's proof: its nonce, its session id, its MAC."""
SHARED = b"\x01"
NOT_SHARED = b"\x00"
"""The listener's answer says whether it took the segment passed with the proof."""
ANSWER_BYTES = COUNT.size + len(SHARED) + MAC_BYTES
"""The listener's answer: its count of the session's frames, ``SHARED`` or not, its MAC."""
AUTH_TIMEOUT_S = 5.0
"""A connection that has not proved the secret this long after it opened is closed."""
_CONTEXT = b"ftactors direct v1 "


class RunSecret:
    """The run's shared key. Its repr never shows the key (it may end up in a log)."""

    __slots__ = ("key",)

    def __init__(self, key: bytes | None = None):
        self.key = key if key is not None else secrets.token_bytes(32)

    def mac(self, role: bytes, first: bytes, second: bytes) -> bytes:
        return hmac.new(self.key, _CONTEXT + role + first + second, hashlib.sha256).digest()

    def __repr__(self) -> str:
        return "RunSecret(<hidden>)"

    def __reduce__(self):
        return (RunSecret, (self.key,))


class HandshakeError(RuntimeError):
    """An input the handshake's table has no step for in its current state."""


class State(enum.Enum):
    NONCE = "nonce"        # client: waits for the listener's nonce
    PROOF = "proof"        # listener: waits for the client's proof
    CHECKED = "checked"    # listener: proof right, answer not yet made
    ANSWER = "answer"      # client: proof sent, waits for the answer
    PROVEN = "proven"      # both: frames (client) and acknowledgements (listener) may go
    REFUSED = "refused"    # both: nothing more is read or written


class Input(enum.Enum):
    NONCE = "nonce"          # the listener's nonce arrived
    PROOF_RIGHT = "proof right"
    PROOF_WRONG = "proof wrong"
    ANSWERED = "answered"    # the listener made its answer
    ANSWER_RIGHT = "answer right"
    ANSWER_WRONG = "answer wrong"
    TIMED_OUT = "timed out"
    LOST = "lost"            # the connection ended


S, I = State, Input
SERVER: dict[tuple[State, Input], tuple[State, str | None]] = {
    (S.PROOF, I.PROOF_RIGHT): (S.CHECKED, None),
    (S.PROOF, I.PROOF_WRONG): (S.REFUSED, "auth_failed"),
    (S.PROOF, I.TIMED_OUT): (S.REFUSED, "auth_timeout"),
    (S.PROOF, I.LOST): (S.REFUSED, "handshake_lost"),
    (S.CHECKED, I.ANSWERED): (S.PROVEN, None),
}
"""The listener's steps: (state, input) -> (next state, the counter a refusal is
counted under)."""
CLIENT: dict[tuple[State, Input], tuple[State, str | None]] = {
    (S.NONCE, I.NONCE): (S.ANSWER, None),
    (S.ANSWER, I.ANSWER_RIGHT): (S.PROVEN, None),
    (S.ANSWER, I.ANSWER_WRONG): (S.REFUSED, "auth_failed"),
}
"""The client's steps, as ``SERVER``. A client whose connection ends before the answer
or that waits for it too long counts nothing: the channel tries again (a failed attempt
is a hint to the coordinator, not a refusal), so those are the glue's."""


class _Machine:
    TABLE: dict = {}

    def __init__(self, secret: RunSecret, state: State):
        self.secret = secret
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self.state = state
        self.buf = b""

    def fire(self, inp: Input) -> str | None:
        """Take the step for ``inp``; the counter a refusal is counted under, or None."""
        try:
            self.state, reason = self.TABLE[(self.state, inp)]
        except KeyError:
            raise HandshakeError(f"{type(self).__name__}: no step from {self.state.value} "
                                 f"on {inp.value}") from None
        return reason


class ServerHandshake(_Machine):
    """The listener's side: ``hello``, then ``receive`` until the proof is whole, then
    ``answer``."""

    TABLE = SERVER

    def __init__(self, secret: RunSecret):
        super().__init__(secret, State.PROOF)
        self.theirs = b""  # the client's nonce and session id, once its proof checked

    def timed_out(self) -> str | None:
        """``AUTH_TIMEOUT_S`` passed: the refusal's counter, None when already proven
        (or refused)."""
        if (self.state, Input.TIMED_OUT) in self.TABLE:
            return self.fire(Input.TIMED_OUT)
        return None

    def lost(self) -> str | None:
        """The connection ended: the refusal's counter, None when it was proven (or
        refused) already."""
        if (self.state, Input.LOST) in self.TABLE:
            return self.fire(Input.LOST)
        return None

    def hello(self) -> bytes:
        """The first bytes the listener writes: its nonce."""
        return self.nonce

    def needs(self) -> int:
        """Bytes still missing from the proof."""
        return PROOF_BYTES - len(self.buf)

    def receive(self, data: bytes) -> tuple[str | None, bytes | None, bytes]:
        """Take ``data`` (what arrived before the proof was whole, and maybe more):
        ``(refusal, session, rest)``: the counter a wrong proof is refused under, the
        session id of a right one (None while the proof is not whole), and the bytes
        after the proof."""
        buf = self.buf + bytes(data)
        if len(buf) < PROOF_BYTES:
            self.buf = buf
            return None, None, b""
        self.buf = b""
        theirs, mac = buf[:NONCE_BYTES + SESSION_BYTES], buf[NONCE_BYTES + SESSION_BYTES:PROOF_BYTES]
        if not hmac.compare_digest(mac, self.secret.mac(b"client", self.nonce, theirs)):
            return self.fire(Input.PROOF_WRONG), None, b""
        self.fire(Input.PROOF_RIGHT)
        self.theirs = theirs
        return None, theirs[NONCE_BYTES:], buf[PROOF_BYTES:]

    def answer(self, count: int, shared: bool) -> bytes:
        """The answer to a right proof: ``count`` frames of the session delivered, and
        whether the listener took the segment passed with the proof."""
        self.fire(Input.ANSWERED)
        answer = COUNT.pack(count) + (SHARED if shared else NOT_SHARED)
        return answer + self.secret.mac(b"server", self.theirs + answer, self.nonce)


class ClientHandshake(_Machine):
    """The connecting side of channel ``session``: ``receive`` gives the proof to write
    once the listener's nonce is there, then the listener's verdict."""

    TABLE = CLIENT

    def __init__(self, secret: RunSecret, session: bytes):
        super().__init__(secret, State.NONCE)
        self.session = session
        self.theirs = b""  # the listener's nonce

    def receive(self, data: bytes) -> tuple[bytes | None, tuple | str | None, bytes]:
        """Take ``data``: ``(proof, verdict, rest)``: the proof to write now (once, when
        the nonce arrived), the verdict once the answer is whole (``(count, shared)``
        for a right one, the refusal's counter for a wrong one) and the bytes after
        the answer (acknowledgements)."""
        buf, proof, verdict = self.buf + bytes(data), None, None
        if self.state is State.NONCE and len(buf) >= NONCE_BYTES:
            self.fire(Input.NONCE)
            self.theirs, buf = buf[:NONCE_BYTES], buf[NONCE_BYTES:]
            mine = self.nonce + self.session
            proof = mine + self.secret.mac(b"client", self.theirs, mine)
        if self.state is State.ANSWER and len(buf) >= ANSWER_BYTES:
            answer, mac = buf[:ANSWER_BYTES - MAC_BYTES], buf[ANSWER_BYTES - MAC_BYTES:ANSWER_BYTES]
            buf = buf[ANSWER_BYTES:]
            if hmac.compare_digest(mac, self.secret.mac(
                    b"server", self.nonce + self.session + answer, self.theirs)):
                self.fire(Input.ANSWER_RIGHT)
                verdict = (COUNT.unpack_from(answer)[0], answer[COUNT.size:] == SHARED)
            else:
                verdict = self.fire(Input.ANSWER_WRONG)
        self.buf = b"" if self.state in (State.PROVEN, State.REFUSED) else buf
        return proof, verdict, buf if self.state is State.PROVEN else b""
