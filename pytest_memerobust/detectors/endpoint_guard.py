"""What bounds the requests to a hosted endpoint (detectors/hosted.py) in time, rate and failures.

- `Deadline`: one request's whole time, connect to last byte. A socket timeout bounds each read alone, so a server
  that drips a byte every 2 s never trips it; here a timer shuts the request's sockets down when its time is up, and
  the reply is read in chunks against the same deadline.
- `Pacer`: `requests_per_second` for the whole run. Every process that asks the endpoint (pool workers, pytest-xdist
  workers) takes the next free slot from one file in the run's shared folder under an exclusive lock, so the run
  keeps to the card's rate whatever the number of processes.
- `Breaker`: after BREAKER_FAILURES failed tries in a row (timeouts, connection errors, 5xx) spanning at least
  min(BREAKER_MIN_S, 3 x timeout_s) seconds, no more requests are sent: each later one fails at once with
  EndpointDown, in every process of the run (the breaker's file in the shared folder), and the run stops. A 429 or 503
  whose Retry-After asks for longer than RETRY_AFTER_MAX_S opens it at once (`Breaker.stop`): the run would otherwise
  wait the cap on every try of every meme and never finish.
"""
from __future__ import annotations

import contextlib
import email.utils
import http.client
import json
import os
import socket
import threading
import time
import urllib.request
from pathlib import Path

from ..errors import EndpointDown

BREAKER_FAILURES = 3  # failed tries in a row that open the breaker ...
BREAKER_MIN_S = 10.0  # ... once they span this long (or three timeouts, if shorter): a blip of fast 503s retried
# within a second or two does not stop a run
RETRY_AFTER_MAX_S = 60.0  # the longest a Retry-After header makes a retry wait; asked for longer, the run stops
ABANDON_POLL_S = 0.5  # how often a request in flight checks whether another process found its endpoint down
CLOCK_SLACK_S = 3600.0  # a shared slot further ahead than this is a clock that jumped back: it is reset


class Deadline:
    """One request's deadline, `seconds` from its start: on expiry, the sockets it watches are shut down, which ends
    any read blocked on them (`with` starts and stops the timer). `abandon()`, asked every ABANDON_POLL_S, ends it
    sooner (its endpoint found down by another process of the run)."""

    def __init__(self, seconds: float, abandon=None):
        self.seconds, self.at, self.abandon = seconds, time.monotonic() + seconds, abandon
        self.expired = self._done = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def left(self) -> float:
        return self.at - time.monotonic()

    def watch(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def _arm(self) -> None:
        with self._lock:
            if self._done:
                return
            wait = max(0.0, self.left())
            self._timer = threading.Timer(wait if self.abandon is None else min(wait, ABANDON_POLL_S), self._tick)
            self._timer.daemon = True
            self._timer.start()

    def _tick(self) -> None:
        if self.left() <= 0 or (self.abandon is not None and self.abandon()):
            self.expire()
        else:
            self._arm()

    def __enter__(self) -> "Deadline":
        self._arm()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._done = True
            if self._timer is not None:
                self._timer.cancel()

    def opener(self, *handlers) -> urllib.request.OpenerDirector:
        """A urllib opener whose connections this deadline watches (proxies and TLS as urllib's own)."""
        return urllib.request.build_opener(*handlers, _WatchedHTTP(self), _WatchedHTTPS(self))

    def timeout(self) -> TimeoutError:
        """The error of a request whose time is up, naming the card key that sets it."""
        return TimeoutError(f"no whole reply within {self.seconds:g} s (the card's timeout_s)")

    def read(self, response, limit: int) -> tuple[bytes, bool]:
        """(the body, whether it was longer than `limit` bytes and so cut there), read in chunks within the
        deadline; TimeoutError once it is up."""
        chunks, size = [], 0
        while True:
            if self.left() <= 0 or self.expired:
                raise self.timeout()
            try:
                chunk = response.read1(64 * 1024) if hasattr(response, "read1") else response.read(64 * 1024)
            except (OSError, http.client.HTTPException, ValueError):
                if self.expired:
                    raise self.timeout() from None
                raise
            if not chunk:
                if self.expired:  # the timer shut the socket: what came is not the whole reply
                    raise self.timeout()
                return b"".join(chunks), False
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(chunks)[:limit], True


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _watched(base: type, deadline: Deadline) -> type:
    """`base` (an http.client connection class) whose sockets `deadline` watches from the moment they exist."""

    class Watched(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            create = self._create_connection
            self._create_connection = lambda *a, **k: deadline.watch(create(*a, **k))

    return Watched


class _WatchedHTTP(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline):
        super().__init__()
        self.deadline = deadline

    def http_open(self, req):
        return self.do_open(_watched(http.client.HTTPConnection, self.deadline), req)


class _WatchedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline):
        super().__init__()
        self.deadline = deadline

    def https_open(self, req):
        return self.do_open(_watched(http.client.HTTPSConnection, self.deadline), req, context=self._context)


def retry_after(headers) -> float | None:
    """Seconds a 429/503 reply's Retry-After asks to wait (a number, or an HTTP date), uncapped: the caller compares
    it with RETRY_AFTER_MAX_S before any wait; None without a readable one."""
    value = (headers.get("Retry-After") if headers is not None else None) or ""
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - time.time()
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


def utc(t: float) -> str:
    """Wall-clock time `t` (seconds since the epoch) as a message prints it."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _locked(path: Path):
    """`path` opened for reading and writing under an exclusive lock (fcntl; None where there is none)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: each process keeps its own pace and breaker
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+b")
    fcntl.flock(handle, fcntl.LOCK_EX)
    handle.seek(0)
    return handle


class Pacer:
    """At most `rate` requests per second, spaced 1/rate apart: in this process alone (`path` None), or across
    every process of the run that takes its slots from the file at `path`."""

    def __init__(self, rate: float, path: Path | None = None):
        self.rate, self.path = rate, path
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        if not self.rate:
            return
        interval = 1.0 / self.rate
        with self._lock:
            handle = _locked(self.path) if self.path is not None else None
            if handle is None:
                now = time.monotonic()
                slot = max(now, self._next)
                self._next = slot + interval
            else:
                with handle:
                    now = time.time()  # the processes share the wall clock, not a monotonic one
                    try:
                        taken = float(handle.read().decode() or 0)
                    except ValueError:
                        taken = 0.0
                    slot = max(now, taken if taken - now < CLOCK_SLACK_S else now)
                    handle.seek(0)
                    handle.truncate()
                    handle.write(repr(slot + interval).encode())
                    handle.flush()
            if slot > now:  # inside the lock: this process's other threads queue behind it
                time.sleep(slot - now)


class Breaker:
    """Counts failed tries in a row; once BREAKER_FAILURES of them span `span` seconds, the endpoint is down for the
    rest of the run: in this process, and (with `path`) in every process that checks the file there."""

    def __init__(self, where: str, span: float, path: Path | None = None):
        self.where, self.span, self.path = where, span, path
        self.failures, self.since, self.last = 0, None, ""
        self.down: str | None = None
        self._open: set[Deadline] = set()  # requests in flight (this process's other threads): ended on a trip
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def watching(self, deadline: Deadline):
        """While a request runs: a trip ends it at once (a thread waiting out its timeout would hold the run)."""
        with self._lock:
            self._open.add(deadline)
        try:
            yield
        finally:
            with self._lock:
                self._open.discard(deadline)

    def found_down(self) -> bool:
        """Whether another process of the run found the endpoint down (the breaker's file): a Deadline's `abandon`."""
        return self.down is not None or (self.path is not None and self.path.is_file())

    def check(self) -> None:
        """EndpointDown if the endpoint is down (here, or as another process of the run found)."""
        if self.down is None and self.path is not None and self.path.is_file():
            try:
                self.down = json.loads(self.path.read_text(encoding="utf-8"))["message"]
            except (OSError, ValueError, KeyError, TypeError):
                self.down = f"{self.where} is down (another process of this run found it so)"
        if self.down is not None:
            raise EndpointDown(self.down)

    def succeeded(self) -> None:
        self.failures, self.since, self.last = 0, None, ""

    def failed(self, what: str) -> None:
        """One more failed try (`what`: why, already redacted); EndpointDown when that opens the breaker, or it was
        open already (a request ended by the trip)."""
        self.check()
        now = time.time()
        self.failures += 1
        self.since = now if self.since is None else self.since
        self.last = what
        if self.failures >= BREAKER_FAILURES and now - self.since >= self.span:
            self.trip(now)

    def trip(self, now: float) -> None:
        stamp = lambda t: time.strftime("%H:%M:%S UTC", time.gmtime(t))  # noqa: E731
        self.stop(f"{self.where} is down: {self.failures} tries in a row failed from {stamp(self.since)} to "
                  f"{stamp(now)} (last: {self.last}); no more requests are sent to it and the run stops here")

    def stop(self, message: str) -> None:
        """Open the breaker with `message` (already redacted), here and in every process of the run: EndpointDown."""
        self.down = message
        with self._lock:
            for deadline in self._open:
                deadline.expire()
        if self.path is not None:
            from ..atomic import atomic_write_text

            try:
                atomic_write_text(self.path, json.dumps({"message": self.down, "pid": os.getpid()}))
            except OSError:  # the others find out by themselves
                pass
        raise EndpointDown(self.down)
