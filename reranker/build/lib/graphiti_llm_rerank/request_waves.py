"""One rank call's requests to a model server that accepts them and never answers.

Every such request waits out its whole timeout. A call with more requests than the connection's
bound (RERANKER_MAX_PARALLEL) sends them as slots free up, so without a rule the rest go out in
waves, each wave paying the timeout again: 10 passages, 4 in flight, three timeouts. The requests
of a call that share one `RequestWaves` pay it once:

- while nothing the call sent has come back (every request that ended timed out), a timeout holds
  the call's next request, which already has its slot, until the requests still in flight end;
- if every one of them timed out too, the server is taken as hung: no further request of the call
  is sent, each raises the connection's "not sent" error instead, and the caller's usual policy
  for a failed request applies (lenient pointwise: the call, with nothing judged, falls back);
- anything else that comes back (an answer, an HTTP error, an unusable body) shows the server is
  there: the held request goes, and the rule is off for the rest of the call. Some passages timing
  out while others are answered is a partial failure, not a hung server.

It works inside the connection's slot (the process-wide bound), so the FIFO order across calls is
unchanged; a held request keeps its slot until the wave's last request ends, at most one timeout.
One call runs on one event loop, so plain asyncio state is enough here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

NOT_SENT = "NotSent"  # the error class of a request held back because its server is taken as hung


class RequestWaves:
    """See the module docstring. `not_sent(timed_out)` makes the error a request raises instead of
    being sent once a wave of `timed_out` requests ended, all of them timed out."""

    def __init__(self, not_sent: Callable[[int], Exception]) -> None:
        self._not_sent = not_sent
        self._in_flight = 0
        self._only_timeouts = True  # every request that has ended so far timed out
        self._wave_timeouts = 0  # timeouts since the hold began; 0: no hold
        self._go = asyncio.Event()  # cleared while a hold lasts
        self._go.set()
        self.hung_after: int | None = None  # the timed-out wave's size, once the server is taken as hung

    @asynccontextmanager
    async def sending(self) -> AsyncIterator[None]:
        """Around one request, inside its slot: waits out a hold, raises instead of sending once the
        server is taken as hung, and learns how the request ended (errors with `timed_out` set are
        timeouts, anything else came back)."""
        await self._go.wait()
        if self.hung_after is not None:
            raise self._not_sent(self.hung_after)
        self._in_flight += 1
        timed_out = False
        try:
            yield
        except Exception as error:
            timed_out = getattr(error, "timed_out", False) is True
            raise
        finally:  # a cancelled request ends too; it does not count as a timeout
            self._ended(timed_out)

    def _ended(self, timed_out: bool) -> None:
        self._in_flight -= 1
        if not timed_out:
            self._only_timeouts = False
        elif self._only_timeouts:
            self._wave_timeouts += 1
            self._go.clear()
        if not self._wave_timeouts:
            return
        if not self._only_timeouts:  # something came back: not hung, the held requests go
            self._release()
        elif self._in_flight == 0:  # the whole wave timed out, nothing ever came back
            self.hung_after = self._wave_timeouts
            self._release()

    def _release(self) -> None:
        self._wave_timeouts = 0
        self._go.set()
