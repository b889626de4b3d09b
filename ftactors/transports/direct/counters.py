"""What a rank's direct plane accepted, refused and did, as numbers
(``RunResult.metrics["direct"]``)."""


class Counters:
    """What a rank's listener accepted and refused (see the module docstring), and how
    its loop waited: ``polled_waits`` ended while it polled, ``not_polling`` is 1 for a
    rank whose loop cannot poll (``_spin``)."""

    FIELDS = ("connections", "tcp_connections", "frames", "auth_failed", "auth_timeout",
              "oversized", "handshake_lost", "truncated", "bad_frame", "dropped_sends",
              "throttled", "reconnects", "resent", "shared", "placed", "shared_refused",
              "shared_fallback", "lent", "lent_copied", "polled_waits", "not_polling")

    def __init__(self):
        for name in self.FIELDS:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.FIELDS}
