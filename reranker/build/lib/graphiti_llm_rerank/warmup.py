"""Loading the judge's model before the first search needs it.

Ollama loads a model on its first request (and again once its keep-alive has unloaded it), which
can take longer than RERANKER_TIMEOUT_S. Without a warm-up the first search's requests time out
while the model loads, and the search keeps the first-stage order. So when the graph runtime builds
the reranker (`_build_reranker`, at the app's start step), `start_warmup` sends one tiny judge
request from a thread of its own, giving the server RERANKER_WARMUP_TIMEOUT_S to answer it:

- while it runs, the app is not ready (`GET /health/ready` answers 503 naming the load), so a load
  balancer or compose keeps traffic away until the model is in memory;
- a rank call that needs the model while the warm-up runs waits for it (`ModelWarmup.until_ready`)
  at most RERANKER_TIMEOUT_S, before its deadline and budget start: no search waits for a load beyond
  its own limits. Still loading then, it falls back to the first-stage order and says why
  (`ModelNotReady`, in its one WARNING and in the search's answer), sending the model nothing;
- answered: the model is loaded ("ready"), and rank calls go on as usual;
- no answer in time ("not_ready"), or any other failure ("failed": server down, unknown model, wrong
  key): later rank calls try the model themselves under the usual RERANKER_TIMEOUT_S, and readiness
  says why, starting another warm-up each time it is asked after one ended, so the app becomes ready
  once the model answers.

/health shows the state under `reranker.stats.warmup`. How long the model then stays loaded is the
server's keep-alive: Ollama's /v1/chat/completions (0.17.4) has no `keep_alive` field (its OpenAI
request type drops unknown fields), so OLLAMA_KEEP_ALIVE decides (30m in docker-compose.yml and on
the project's own Ollama, app/local_llm/ollama.py); each request starts that time again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from graphiti_llm_rerank.judge import JudgeError, LLMJudge

logger = logging.getLogger(__name__)

MODEL_NOT_READY = "ModelNotReady"  # the error class of a rank call that waited for a warm-up in vain
POLL_S = 0.05  # how often a waiting rank call looks at the warm-up (which runs in another thread)

WARMING, READY, NOT_READY, FAILED = "warming", "ready", "not_ready", "failed"


class ModelWarmup:
    """One warm-up of `judge`'s model; see the module docstring. `start()` runs it in a daemon thread."""

    def __init__(self, judge: LLMJudge, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.judge = judge
        self.timeout_s = float(timeout_s)
        self._lock = threading.Lock()
        self._state = WARMING
        self._detail: str | None = None  # why it is not ready or failed
        self._started = time.monotonic()
        self._seconds: float | None = None  # from the start to the answer (or failure)
        self._done = threading.Event()

    @property
    def state(self) -> str:
        with self._lock:
            return self._state

    def start(self) -> "ModelWarmup":
        logger.info("Reranker model %r: warming up (up to %gs to load)", self.judge.model, self.timeout_s)
        threading.Thread(target=self._run, name="reranker-warmup", daemon=True).start()
        return self

    @property
    def ended(self) -> bool:
        return self._done.is_set()

    async def until_ready(self, wait_s: float) -> str | None:
        """Wait while the warm-up runs, at most `wait_s` (the rank call's own RERANKER_TIMEOUT_S).
        None: go on; else why the model is not ready (this call waited, and the model was still
        loading, or the warm-up got no answer in time)."""
        if self._done.is_set():
            return None  # ended before this call: a later call tries the model itself
        give_up = time.monotonic() + wait_s
        while not self._done.is_set() and time.monotonic() < give_up:
            await asyncio.sleep(POLL_S)
        with self._lock:
            if self._state == WARMING:
                return (f"the model is still loading (its warm-up request has run "
                        f"{time.monotonic() - self._started:.0f}s of up to {self.timeout_s:g}s)")
            return self._detail if self._state == NOT_READY else None

    def not_ready(self) -> str | None:
        """Why the app is not ready for this model (readiness), or None once it answered."""
        with self._lock:
            if self._state == READY:
                return None
            if self._state == WARMING:
                return (f"the reranker's model {self.judge.model!r} is loading: its warm-up request has run "
                        f"{time.monotonic() - self._started:.0f}s of up to {self.timeout_s:g}s")
            return f"the reranker's model {self.judge.model!r} is not ready: {self._detail}"

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            seconds = self._seconds if self._seconds is not None else time.monotonic() - self._started
            return {"state": self._state, "seconds": round(seconds, 3), "timeout_s": self.timeout_s,
                    "detail": self._detail}

    # -- internals --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._warm())
        except BaseException as error:  # a bug: rank calls must not wait for a warm-up that ended
            self._finish(FAILED, f"{type(error).__name__}: {error}")
            logger.exception("Reranker model %r: the warm-up failed", self.judge.model)

    async def _warm(self) -> None:
        try:
            await self.judge.warm_up(self.timeout_s)
        except JudgeError as error:
            if error.timed_out:
                self._finish(NOT_READY, f"the model did not answer its warm-up request within {self.timeout_s:g}s "
                                        "(still loading, or the server does not answer)")
            else:
                self._finish(FAILED, str(error))
        else:
            self._finish(READY)
        finally:
            await self.judge.aclose()  # this loop's HTTP client; the loop ends here

    def _finish(self, state: str, detail: str | None = None) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._state, self._detail = state, detail
            self._seconds = time.monotonic() - self._started
            seconds = self._seconds
        self._done.set()
        if state == READY:
            logger.info("Reranker model %r: ready after %.1fs (warm-up)", self.judge.model, seconds)
        else:  # a rank call that meets it says so in its own WARNING; /health shows it meanwhile
            logger.info("Reranker model %r: not ready after %.1fs of warm-up: %s", self.judge.model, seconds, detail)


_starting = threading.Lock()  # readiness checks on several threads may each ask for another warm-up


def start_warmup(judge: LLMJudge, timeout_s: float) -> ModelWarmup | None:
    """Warm `judge`'s model in the background (timeout_s 0: no warm-up). The judge keeps the warm-up
    (`judge.warmup`) so the rank calls on it wait for it; one still running is reused."""
    if timeout_s <= 0:
        return None
    with _starting:
        current = judge.warmup
        if current is not None and current.state == WARMING:
            return current
        judge.warmup = ModelWarmup(judge, timeout_s).start()
        return judge.warmup
