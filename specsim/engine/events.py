"""The event loop of the step-by-step engine: SimPy's event order and clock arithmetic, without SimPy's objects.

The replicas' loops are generators. Each yields either a delay (SimPy's `env.timeout(delay)`) or `WAIT` (wait for
`Clock.signal`, SimPy's one-shot "a client freed up" event). What stays exactly as SimPy did it, so every time is
bit-identical to the SimPy engine this replaces:
- the clock after a delay d scheduled at time `now` is `now + d` (SimPy's `Environment.schedule`);
- events fire in (time, priority, scheduling order): a process starts with an URGENT (0) event at t = 0, timeouts
  and signals are NORMAL (1); the order counter is SimPy's event id (gaps in it change no comparison);
- a signal resumes its waiters in the order they started waiting, each running until its next yield before the
  next one resumes (SimPy's callback list).
One replica never waits for a signal (nothing else could free a client), so its delays just add up in a loop.
SimPy was ~27% of a batch-64 run (the Timeout objects, the heap, the generator resumption through callbacks).
"""

from __future__ import annotations

import heapq

WAIT = object()  # yielded by a process: resume me at the next `signal`
_URGENT, _NORMAL = 0, 1


class Clock:
    """Simulated time and the pending events of the processes (see the module doc)."""

    def __init__(self):
        self.now = 0.0
        self._heap: list = []
        self._seq = 0
        self._waiters: list = []

    def signal(self) -> bool:
        """Wake the processes waiting on WAIT (at the current time, after what is already due); False if none."""
        if not self._waiters:
            return False
        heapq.heappush(self._heap, (self.now, _NORMAL, self._seq, self._waiters))
        self._seq += 1
        self._waiters = []
        return True

    def run(self, processes: list) -> None:
        """Run the generators until no event is pending."""
        if len(processes) == 1:
            return self._run_one(processes[0])
        heap, pop = self._heap, heapq.heappop
        for p in processes:
            heapq.heappush(heap, (0.0, _URGENT, self._seq, (p,)))
            self._seq += 1
        while heap:
            self.now, _, _, ps = pop(heap)
            for p in ps:
                self._resume(p)

    def _resume(self, p) -> None:
        y = next(p, None)
        if y is None:  # the process returned
            return
        if y is WAIT:
            self._waiters.append(p)
            return
        heapq.heappush(self._heap, (self.now + y, _NORMAL, self._seq, (p,)))
        self._seq += 1

    def _run_one(self, p) -> None:
        for y in p:
            if y is WAIT:  # no other process can signal: SimPy would have run out of events here too
                return
            self.now = self.now + y
