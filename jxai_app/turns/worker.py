"""This worker's hub: one per event loop, with its lease watch, drained on SIGTERM
(docs/turns.md "Draining").

:func:`get_hub` makes the worker's :class:`~jxai_app.turns.hub.TurnHub` on first use (the
first socket or request), with the lease watch (:class:`~jxai_app.turns.recovery.LeaseWatch`)
as its job, and under daphne hooks it to the reactor: SIGTERM drains it, any other stop
stops its turns first.
"""

from __future__ import annotations

import asyncio
import signal
import weakref

from jxai_app import conf
from jxai_app.turns.hub import TurnHub
from jxai_app.turns.recovery import LeaseWatch

__all__ = ["get_hub"]

_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TurnHub] = weakref.WeakKeyDictionary()


def get_hub() -> TurnHub:
    """The hub of the running event loop (one per worker process; tests get one per loop).

    Raises:
        RuntimeError: called outside a running event loop.
    """
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = TurnHub(jobs=(LeaseWatch(),))
        _install_shutdown(hub, loop)
    return hub


def _install_shutdown(hub: TurnHub, loop: asyncio.AbstractEventLoop) -> None:
    """Under daphne (Twisted's asyncio reactor): SIGTERM drains (:meth:`TurnHub.drain`, for
    ``JXAI_DRAIN_SECONDS``) and then stops the reactor; any other stop (Ctrl-C) stops the
    hub's turns before the reactor stops, so their partial messages are dropped."""
    try:  # imported only here: importing the reactor module installs a reactor, which is daphne's to choose
        from twisted.internet import reactor  # type: ignore[import-untyped]
        from twisted.internet.defer import Deferred  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - daphne depends on twisted
        return
    if not getattr(reactor, "running", False):
        return

    async def drain_then_stop() -> None:
        try:
            await hub.drain(conf.get_turn_timing().drain)
        finally:
            reactor.stop()

    def on_sigterm() -> None:
        if not hub.draining:
            hub.spawn(drain_then_stop(), name="jxai-drain")

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    reactor.addSystemEventTrigger("before", "shutdown", lambda: Deferred.fromFuture(
        asyncio.ensure_future(hub.shutdown())))
