"""A load balancer's view of several API replicas, for load runs: each replica's readiness
(GET /health/ready) checked every CHECK_EVERY_S, a replica that fails FAILURES_TO_REMOVE checks in a
row taken out of rotation and one that passes put back, and clients spread over the replicas in
rotation (client i on the i-th, modulo how many there are).

A run that kills a replica on purpose says so first (`take_down`): the requests that fail on it
from then on are lost at the kill, counted apart from errors on replicas that live, and clients keep
sending to it until the readiness checks take it out, as behind a real balancer.
"""

from __future__ import annotations

import http.client
import threading
import time

from bench.load_run import request_json

CHECK_EVERY_S = 0.5
CHECK_TIMEOUT_S = 5.0  # a replica busy with the load may answer its readiness slowly; that is no failure
FAILURES_TO_REMOVE = 2


class Balancer:
    def __init__(self, ports: list[int], check_every_s: float = CHECK_EVERY_S) -> None:
        self.ports = list(ports)
        self.check_every_s = check_every_s
        self._in_rotation = set(self.ports)
        self._failures = {port: 0 for port in self.ports}
        self._taken_down: dict[int, float] = {}  # port -> when (monotonic)
        self.removed_at: dict[int, float] = {}  # port -> when the checks took it out (monotonic)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Balancer":
        self._thread = threading.Thread(target=self._check_loop, name="balancer-checks", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=CHECK_TIMEOUT_S + 1)

    def live(self) -> list[int]:
        """The replicas in rotation, in their order; all but those taken down while none passes."""
        with self._lock:
            live = [port for port in self.ports if port in self._in_rotation]
            return live or [port for port in self.ports if port not in self._taken_down] or list(self.ports)

    def port_for(self, client: int) -> int:
        live = self.live()
        return live[client % len(live)]

    def take_down(self, port: int) -> None:
        with self._lock:
            self._taken_down[port] = time.monotonic()

    def taken_down(self, port: int) -> bool:
        with self._lock:
            return port in self._taken_down

    def _check_loop(self) -> None:
        while not self._stop.wait(self.check_every_s):
            for port in self.ports:
                ready = _ready(port)
                with self._lock:
                    self._failures[port] = 0 if ready else self._failures[port] + 1
                    if ready:
                        self._in_rotation.add(port)
                    elif self._failures[port] >= FAILURES_TO_REMOVE and port in self._in_rotation:
                        self._in_rotation.discard(port)
                        self.removed_at[port] = time.monotonic()


def _ready(port: int) -> bool:
    try:
        return request_json(port, "GET", "/health/ready", timeout=CHECK_TIMEOUT_S)[0] == 200
    except (OSError, http.client.HTTPException, ValueError):
        return False
