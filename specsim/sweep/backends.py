"""Where a sweep's chunks run: this process, local worker processes, or a Dask cluster.

- `--workers` is refused above `max_workers()`: 4 x the CPUs this process may use, and never more than
  MAX_WORKERS (64). The default is the CPU count (at most 64). More processes than that only fork memory.
- `--scheduler` is probed before a Dask client is made: a TCP connection within CONNECT_TIMEOUT_S and the
  scheduler's handshake (a Dask server speaks first). A closed port, an HTTP server or a silent peer is one
  line, with no client left behind to print "Exception ignored" at exit. A scheduler without workers is waited
  for up to WORKERS_TIMEOUT_S.
- A backend that goes away mid-sweep (the Dask cluster, a local worker killed by the OOM killer) raises
  `BackendLost`; the sweep keeps its finished parts and says how to resume.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from specsim.errors import ConfigError

MAX_WORKERS = 64
CONNECT_TIMEOUT_S = 10.0
WORKERS_TIMEOUT_S = 60.0
_DASK_PORT = 8786
# loggers that print a lost scheduler's reconnect attempts as tracebacks; quiet while a sweep holds a client
_NOISY = ("distributed.client", "distributed.utils", "distributed.comm", "distributed.core", "distributed.batched")


class BackendLost(Exception):
    """The machinery running the chunks went away (not a point's own error)."""


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers() -> int:
    return max(1, min(available_cpus(), MAX_WORKERS))


def max_workers() -> int:
    return max(1, min(4 * available_cpus(), MAX_WORKERS))


def check_workers(workers: int | None) -> int:
    if workers is None:
        return default_workers()
    top = max_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= top:
        raise ConfigError("number of local worker processes out of range", field="--workers", value=workers,
                          allowed=f"1 to {top} (4 x the {available_cpus()} CPUs available, at most {MAX_WORKERS}); "
                                  f"use --scheduler for a cluster")
    return workers


class Inline:
    """workers=1: run chunks in this process (no pickling; easiest to debug)."""

    name, slots, max_in_flight = "inline", 1, 1

    def submit(self, fn, *args) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
            f.set_exception(e)
        return f

    def wait_any(self, futures):
        return futures

    def result(self, fut):
        return fut.result()

    def close(self) -> None:
        pass


class Processes:
    name = "processes"

    def __init__(self, workers: int):
        self.slots, self.max_in_flight = workers, 2 * workers
        self.pool = ProcessPoolExecutor(max_workers=workers)

    def submit(self, fn, *args) -> Future:
        try:
            return self.pool.submit(fn, *args)
        except BrokenProcessPool as e:
            raise BackendLost(str(e)) from None

    def wait_any(self, futures):
        return wait(futures, return_when=FIRST_COMPLETED).done

    def result(self, fut):
        try:
            return fut.result()
        except BrokenProcessPool as e:
            raise BackendLost(str(e)) from None

    def close(self) -> None:
        # wait: forked workers share the directory lock's open file; they must be gone before it is released
        self.pool.shutdown(wait=True, cancel_futures=True)


class Dask:
    name = "dask"

    def __init__(self, address: str):
        probe_scheduler(address)
        import distributed

        self._levels = {name: logging.getLogger(name).level for name in _NOISY}
        for name in _NOISY:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        self.client = None
        try:
            self.client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
            self.slots = self._wait_for_workers(address)
        except (OSError, TimeoutError, ValueError) as e:
            self.close()
            raise ConfigError(f"cannot reach the Dask scheduler ({type(e).__name__}: {e})", field="--scheduler",
                              value=address) from None
        except BaseException:
            self.close()
            raise
        self.max_in_flight = 2 * self.slots
        self._completed = distributed.as_completed(loop=self.client.loop)  # not the global default client

    def _wait_for_workers(self, address: str) -> int:
        deadline = time.monotonic() + WORKERS_TIMEOUT_S
        while True:
            threads = sum(self.client.nthreads().values())
            if threads:
                return threads
            if time.monotonic() > deadline:
                raise ConfigError(f"the Dask scheduler has no workers (waited {WORKERS_TIMEOUT_S:g} s); start some "
                                  f"with `dask worker {address}`", field="--scheduler", value=address)
            time.sleep(0.5)

    def submit(self, fn, *args):
        try:
            f = self.client.submit(fn, *args, pure=False)
        except Exception as e:  # noqa: BLE001 - lost only if the client is; else (a pickling error) re-raised
            if self.client.status != "running":
                raise BackendLost(f"{type(e).__name__}: {str(e)[:120]}") from None
            raise
        self._completed.add(f)
        return f

    def wait_any(self, futures):
        try:
            return self._completed.next_batch(block=True)
        except Exception as e:  # noqa: BLE001 - the client's connection, not a point
            raise BackendLost(f"{type(e).__name__}: {e}") from None

    def result(self, fut):
        import distributed

        lost = (distributed.client.FutureCancelledError, distributed.comm.CommClosedError,
                distributed.scheduler.KilledWorker, OSError, TimeoutError)
        try:
            return fut.result()
        except lost as e:
            raise BackendLost(f"{type(e).__name__}: {str(e)[:120]}") from None
        except Exception as e:  # a cancelled future of a closed client is a plain CancelledError
            if type(e).__name__ in ("CancelledError", "FutureCancelledError"):
                raise BackendLost(f"{type(e).__name__}: {str(e)[:120]}") from None
            raise

    def close(self) -> None:
        try:
            if self.client is not None:
                self.client.close(timeout=CONNECT_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a cluster already gone has nothing left to close
            pass
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)


def make_backend(scheduler: str | None, workers: int):
    if scheduler:
        return Dask(scheduler)
    return Inline() if workers == 1 else Processes(workers)


DASK_SCHEMES = ("tcp", "tls", "ucx", "inproc", "ws", "wss")  # distributed.comm's registered backends


def probe_scheduler(address: str, timeout_s: float | None = None) -> None:
    """Refuse, in one line and within `timeout_s`, an address where no Dask scheduler answers."""
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    scheme, host, port = _split_address(address)
    if scheme not in DASK_SCHEMES:  # e.g. http://: the dashboard's address, not the scheduler's
        raise ConfigError(f"not a Dask scheduler address (scheme {scheme}://)", field="--scheduler", value=address,
                          allowed="tcp://HOST:PORT as the scheduler prints it (or tls://, ucx://, ws://, wss://)")
    if scheme != "tcp":
        return  # tls://, ucx://, ws://: left to the client's own connect timeout
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except socket.timeout:
        raise ConfigError(f"no connection within {timeout_s:g} s", field="--scheduler", value=address) from None
    except OSError as e:
        raise ConfigError(f"cannot connect ({e.strerror or e})", field="--scheduler", value=address) from None
    data, deadline = b"", time.monotonic() + timeout_s
    with sock:
        while b"pickle-protocol" not in data and len(data) < 65536:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                chunk = sock.recv(4096)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
    if b"pickle-protocol" not in data:
        heard = f"it sent {data[:40]!r}" if data else f"no handshake within {timeout_s:g} s"
        raise ConfigError(f"not a Dask scheduler ({heard})", field="--scheduler", value=address,
                          allowed="the address a Dask scheduler prints, e.g. tcp://HOST:8786")


def _split_address(address: str) -> tuple[str, str, int]:
    scheme, sep, loc = address.partition("://")
    if not sep:
        scheme, loc = "tcp", address
    if scheme != "tcp":
        return scheme, loc, 0
    host, port = loc, _DASK_PORT
    if loc.startswith("["):  # [IPv6]:port
        host, bracket, rest = loc[1:].partition("]")
        host = host if bracket else ""
        port_text = rest[1:] if rest.startswith(":") else ""
    elif loc.count(":") == 1:
        host, _, port_text = loc.partition(":")
    else:
        port_text = ""
    try:
        if port_text:
            port = int(port_text)
        if not host or not 0 < port < 65536:
            raise ValueError
    except ValueError:
        raise ConfigError("not a scheduler address", field="--scheduler", value=address,
                          allowed="tcp://HOST:PORT (or HOST:PORT)") from None
    return scheme, host, port
