"""The owner's message hooks, looked up once per endpoint rather than called per message.

Theory of operation: every application message passes the protocol stack's ``on_send``
or ``on_receive``, and every receive that blocks its ``on_blocked`` (``runtime/_protocol``:
the stack is the owner's class, its mixins chained by ``super()``). Most stacks override
few of them, and a rank with no protocol overrides none; then the call goes straight to
the base implementation, which only hands the message back. The base marks those
implementations ``passes_on``, and the endpoint asks ``message_hook`` once, as it is
built, for each hook: the bound hook, or None where the owner's is the base's. The hot
path then calls a hook only where some mixin of the class does something with it, and
pays one test of a local where it does not. The lookup is per endpoint, that is per
class and incarnation: a class's methods do not change while its ranks run.
"""
from __future__ import annotations

from typing import Callable


def passes_on(hook: Callable) -> Callable:
    """Mark ``hook`` as one that only passes the message on (a protocol base's): an
    endpoint whose owner has it does not call it (``message_hook``)."""
    hook.passes_on = True
    return hook


def message_hook(owner, name: str) -> Callable | None:
    """``owner``'s hook ``name`` bound, or None when it has none or only the base's
    (``passes_on``)."""
    hook = getattr(owner, name, None)
    return None if hook is None or getattr(hook, "passes_on", False) else hook
