"""Who evaluates a shard: this process, a pool of worker processes on this machine (the default on a CPU), the
pytest-xdist workers of a run together, or a pool of Ray actors on one host or many.

Every executor yields `ShardResult`s keyed by their shard; `ShardRunner` puts them back in meme order, so the report
is the same bytes whichever executor ran the shards. Ray is an optional extra (`pip install "pytest-memerobust[ray]"`):
it does the distribution, the restarts and the retries; nothing here schedules beyond handing each idle actor the
next shard.
"""
from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..determinism import encode_batch
from ..errors import ConfigError
from . import pool_worker
from .features import CacheStats
from .shards import DetectorAnswers, InProcess, ShardResult, ShardTask, evaluate_shard, fit_here, fit_side

ACTOR_RESTARTS = 3  # a killed actor is started again this many times, and its shard re-run (Ray's own retries)
HOLD_ENV = "MEMEROBUST_TEST_HOLD"  # tests only: a folder where actors note and hold shards (see hold_for_tests)
HOLD_MAX_S = 300.0  # the longest a held shard waits


def make_executor(ray: str | None = None, shard_folder: Path | None = None, gpus: bool = False,
                  workers: int | None = 1):
    """The executor a run's options ask for: Ray actors (`ray`: auto, local:N or ADDRESS), the pytest-xdist workers'
    shared folder, a pool of `workers` local processes on a CPU (None: `usable_cores`; never more than the cores this
    process may run on, the note says so), or None (in this process). On a GPU the pool is never used: one process
    feeds the device."""
    if ray:
        return RayActors(ray, gpus=gpus)
    if shard_folder is not None:
        return SharedFolder(shard_folder)
    if gpus:
        return None
    requested = usable_cores() if workers is None else workers
    return LocalPool(min(requested, affinity_cores()), requested=requested) if requested > 1 else None


def affinity_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and `taskset` narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def usable_cores() -> int:
    """`affinity_cores`, or 1 inside a pytest-xdist worker, whose run already spreads over the cores."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return 1
    return affinity_cores()


POOL_START_S = 5.0  # seconds from a worker's spawn to its engine built (interpreter, package, torch, detector,
# memes) until the run measured one: about what two workers starting at once take on a quiet 2-core machine
# (bench/pool_scaling.py; docs/benchmarks.md)
POOL_POLL_S = 0.2  # how often the driver moves the workers' progress onto its bar
POOL_SETTLE_S = 30.0  # the longest a broken pool's other shards take to come back or fail with it


class LocalPool:
    """Shards on a pool of worker processes of this machine, each computing at determinism.RESULT_THREADS intra-op
    threads, as this process does, so the report is the same bytes at any number of workers, wherever each shard
    ran. Each worker builds the engine once per run from its `recipe` (the detector loaded, the memes read) and keeps
    it for the run's later passes.

    When the pool pays is measured, not counted: a pass runs here, shard after shard, and once it has run as long as
    a start of the workers takes (`start_cost`), the shards not begun go to the pool while this process ends the one
    it is in. So a pass cheaper than a start never starts one, and a few memes under an expensive attack start it
    after seconds; either way a pass takes at most about twice what the better choice would have (rent or buy: the
    cost is only known once paid). Workers are spawned, not forked (a fork of a process whose OpenMP threads ran can
    hang), as many as the shards handed over need, at most `workers`.

    A worker that dies (killed, out of memory) breaks the pool: a new pool runs the shards that did not come back,
    once; shards lost again fail their conditions with an error that names them."""

    name = "local"

    def __init__(self, workers: int, start_s: float | None = None, requested: int | None = None):
        self.workers = workers
        self.requested = workers if requested is None else requested  # what the run asked for (the note's cap)
        self.start_s = start_s  # a start cost fixed by the caller (None: measured, POOL_START_S until measured)
        self.passes = self.shards = self.here = self.fits = 0  # what the pool did in this run (the run's notes)
        self.batches = self.batches_here = 0  # encoder batches run on the pool, and here meanwhile (encode_batches)
        self.read_pictures = 0  # pictures whose text the pool's workers read (ocr_readings)
        self.size = 0  # the most worker processes that ran at once
        self.rerun: list[int] = []  # shards run again on a new pool after a worker died
        self.unstarted: str | None = None  # why the pool could not start, when it could not (the run's note)
        self.worker_stats = CacheStats()  # what the shards did to the workers' feature stores (the run's note)
        self._pool = self._progress = self._requests = None
        self._built: set[str] = set()  # the recipes handed to the workers: built, or being built
        self._ready_s: float | None = None  # measured: seconds from a worker's spawn to its first engine built
        self._build_s: float | None = None  # measured: seconds a worker took to build an engine

    def start_cost(self, recipe: Callable) -> float:
        """Seconds before the pool can evaluate `recipe`'s shards: none once it was handed that engine; else an
        engine built (as measured in this run's workers) or a whole start (measured, else POOL_START_S; 0 there
        sends every pass of two shards or more to the pool at once, as tests need)."""
        if self._pool is not None and recipe_key(recipe) in self._built:
            return 0.0
        if self.start_s is not None or not POOL_START_S:
            return self.start_s or 0.0
        start = POOL_START_S if self._ready_s is None else self._ready_s
        return start if self._pool is None or self._build_s is None else self._build_s

    def worker_pids(self) -> list[int]:
        """The workers' process ids (for tests that check who did the work)."""
        return sorted(getattr(self._pool, "_processes", None) or {})

    def run(self, engine, tasks: list[ShardTask], conditions, tick=None) -> Iterator[ShardResult]:
        import pickle

        recipe = getattr(engine, "recipe", None)
        if recipe is None or self.workers < 2 or len(tasks) < 2:
            yield from InProcess().run(engine, tasks, conditions, tick)
            return
        shared = pickle.dumps((recipe, list(conditions), engine.attack_memo()), protocol=pickle.HIGHEST_PROTOCOL)

        def received(task: ShardTask, result: ShardResult) -> ShardResult:
            self.worker_stats.add(result.accounting.store_stats)
            return result

        def lost(tasks: list[ShardTask], cause: BaseException) -> list[ShardResult]:
            error = RuntimeError(f"{_named(tasks)}: a worker process of the pool (--memerobust-workers) died while "
                                 f"evaluating {'them' if len(tasks) > 1 else 'it'}, and again on a new pool "
                                 f"({type(cause).__name__}: {cause})")
            errors = {condition.id: error for condition in conditions}
            return [ShardResult(task.index, DetectorAnswers({}, errors)) for task in tasks]

        def ticked(memes: int) -> None:  # the bar moves with the workers too while this process evaluates a shard
            tick(memes)
            self._drain(tick)

        here = InProcess()  # this process's shards go the in-process executor's way (its evaluate_shard)
        yield from self._spread(recipe, tasks, lambda task: next(iter(here.run(engine, [task], conditions,
                                                                                 ticked if tick else None))),
                                _evaluate_in_pool_worker, shared, received, lost, tick)

    def fit(self, engine, sides: list[tuple]):
        """Universal attacks fitted, each into a copy of the engine's memo whose new entries come back and join the
        engine's (a fit at one thread gives the same bytes in any process): here one after the other, and on the
        pool the sides not begun once the fits took as long as the pool's start. The highest severity first: a
        trigger's fit grows with its length in words, and a worker left alone with the longest fit at the end keeps
        the others waiting. Yields (side, error or None) as each ends."""
        import pickle

        recipe = getattr(engine, "recipe", None)
        if recipe is None or self.workers < 2 or len(sides) < 2:
            yield from fit_here(engine, sides)
            return
        memo = engine.attack_memo()
        shared = pickle.dumps((recipe, memo), protocol=pickle.HIGHEST_PROTOCOL)

        def received(side: tuple, value: tuple) -> tuple:
            fitted, error = value
            memo.update(fitted)
            return side, error

        def lost(sides: list[tuple], cause: BaseException) -> list[tuple]:
            return [(side, RuntimeError(f"the universal attack fit {side}: a worker process of the pool died while "
                                        f"fitting it, and again on a new pool ({type(cause).__name__}: {cause})"))
                    for side in sides]

        yield from self._spread(recipe, sorted(sides, key=lambda side: -(side[2] or 0)),
                                lambda side: (side, fit_side(engine, side)[1]), _fit_in_pool_worker, shared,
                                received, lost)

    def encode_batches(self, recipe: Callable) -> Callable:
        """A `run_batches` for determinism.encode_fixed (as `run(modality, encode, work, batch_size)`): the
        fixed-shape batches of one encoding run here until they have taken as long as the pool's start, then the
        rest on the workers, each of which builds `recipe()` once (an object with encode_texts / encode_images
        that computes what `encode` computes: training checks its encoders' fingerprints); rows come back with
        their batch's number. A batch's rows are the same bytes in any process (one thread, one shape). A pool
        that breaks twice leaves its batches to this process."""
        import pickle

        def run(modality: str, encode: Callable, work: list, batch_size: int) -> Iterator[tuple[int, object]]:
            if self.workers < 2 or len(work) < 2:
                yield from ((k, encode_batch(encode, chunk, length, batch_size)) for k, (length, chunk)
                            in enumerate(work))
                return
            shared = pickle.dumps((recipe, modality, batch_size), protocol=pickle.HIGHEST_PROTOCOL)
            items = [EncoderBatch(k, length, chunk) for k, (length, chunk) in enumerate(work)]

            def here(item: EncoderBatch) -> tuple[int, object]:
                return item.number, encode_batch(encode, item.chunk, item.length, batch_size)

            yield from self._spread(recipe, items, here, _encode_in_pool_worker, shared,
                                    lambda item, rows: (item.number, rows),
                                    lambda lost, cause: [here(item) for item in lost])

        return run

    def ocr_readings(self, recipe: Callable) -> Callable:
        """A `read_elsewhere` for an OCR reader (data/ocr.py RapidOcr.read_all), as `read(pictures, here)`: the
        pictures' readings (`here(picture)`: its text boxes) in this process until they have taken as long as the
        pool's start, then on the workers, each building the reader `recipe()` once, OCR_CHUNK pictures a task;
        the readings come back in the pictures' order. A reading depends on the picture alone (determinism.py:
        onnxruntime and OpenCV at one thread), so it is the same wherever it ran."""
        import pickle

        def read(pictures: list, here: Callable) -> list:
            if self.workers < 2 or len(pictures) < 2:
                return [here(picture) for picture in pictures]
            shared = pickle.dumps(recipe, protocol=pickle.HIGHEST_PROTOCOL)
            chunks = [PictureChunk(k, pictures[start : start + OCR_CHUNK])
                      for k, start in enumerate(range(0, len(pictures), OCR_CHUNK))]

            def read_here(chunk: PictureChunk) -> tuple[int, list]:
                return chunk.number, [here(picture) for picture in chunk.pictures]

            read_back = dict(self._spread(recipe, chunks, read_here, _read_in_pool_worker, shared,
                                          lambda chunk, readings: (chunk.number, readings),
                                          lambda lost, cause: [read_here(chunk) for chunk in lost]))
            return [reading for k in range(len(chunks)) for reading in read_back[k]]

        return read

    def _spread(self, recipe: Callable, items: list, here: Callable, remote: Callable, shared: bytes,
                received: Callable, lost: Callable, tick=None) -> Iterator:
        """Each item's output: `here(item)` in this process, one item after the other, until this call has run
        `start_cost` seconds; then the items not begun go to the pool (`remote(shared, item)` in a worker, whose
        value `received(item, value)` makes an output). A broken pool's items run again on a new one, once;
        `lost(items, cause)` gives the outputs of the items lost twice."""
        import collections

        todo, lock, handed = collections.deque(items), threading.Lock(), {}

        def hand_over() -> None:  # in the timer's thread, while this one evaluates an item
            with lock:
                rest = list(todo)
                todo.clear()
            for k, item in enumerate(rest):
                try:
                    handed[self._submit(remote, shared, item)] = item
                except Exception as error:  # no pool to be had: this process runs what was not handed
                    self.unstarted = f"{type(error).__name__}: {error}"
                    with lock:
                        todo.extendleft(reversed(rest[k:]))
                    return

        wait_s = self.start_cost(recipe)
        timer = threading.Timer(wait_s, hand_over)
        timer.daemon = True
        ran_here = 0
        try:
            if wait_s <= 0:
                hand_over()
            while True:
                with lock:
                    item = todo.popleft() if todo else None
                if item is None:
                    timer.cancel()
                    if timer.is_alive():
                        timer.join()  # a hand-over under way ends first (it may give items back)
                    if todo:
                        continue
                    break
                if ran_here == 0 and wait_s > 0:
                    # timed from the first item taken, so that item runs here however the threads are scheduled
                    # (started before it, a short timer on a loaded machine handed every item over, the first too)
                    timer.start()
                ran_here += 1
                yield here(item)
            if handed:
                self._built.add(recipe_key(recipe))
                if isinstance(items[0], ShardTask):
                    self.passes, self.shards = self.passes + 1, self.shards + len(handed)
                    self.here += ran_here
                elif isinstance(items[0], EncoderBatch):
                    self.batches, self.batches_here = self.batches + len(handed), self.batches_here + ran_here
                elif isinstance(items[0], PictureChunk):
                    self.read_pictures += sum(len(item.pictures) for item in handed.values())
                else:
                    self.fits += len(handed)
                yield from self._collected(handed, remote, shared, received, lost, tick)
        finally:
            timer.cancel()
            if timer.is_alive():
                timer.join()
            for future in handed:  # an interrupted or failed pass: the items not yet started are dropped
                future.cancel()

    def _collected(self, handed: dict, remote: Callable, shared: bytes, received: Callable, lost: Callable,
                   tick) -> Iterator:
        """The outputs of the items `handed` to the pool (future -> item), as they come back."""
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        pending, again = set(handed), False
        while pending:
            done, pending = wait(pending, timeout=POOL_POLL_S, return_when=FIRST_COMPLETED)
            self._drain(tick)
            broken: list = []
            for future in done:
                error = future.exception()
                if isinstance(error, BrokenProcessPool):
                    broken.append(future)
                    continue
                value, timing = future.result()  # a shard's own failure (not a condition's) ends the pass here
                self._measured(*timing)
                yield received(handed[future], value)
            if not broken:
                continue
            # a worker died: the pool's other futures soon end too, with their value or the same error
            settled, pending = wait(pending, timeout=POOL_SETTLE_S)
            for future in settled:
                if isinstance(future.exception(), BrokenProcessPool):
                    broken.append(future)
                else:
                    yield received(handed[future], future.result()[0])
            items, cause = [handed[future] for future in broken + list(pending)], broken[0].exception()
            self._close_pool()
            if again:
                yield from lost(items, cause)
                return
            again = True
            self.rerun += [item.index for item in items if isinstance(item, ShardTask)]
            try:
                handed = {self._submit(remote, shared, item): item for item in items}
            except Exception as error:
                yield from lost(items, error)
                return
            pending = set(handed)
        self._drain(tick)

    def _measured(self, ready_s: float | None, build_s: float | None) -> None:
        """A worker's start as it measured it: the estimate for the run's later passes."""
        if ready_s is not None:
            self._ready_s = max(ready_s, self._ready_s or 0.0)
        if build_s is not None:
            self._build_s = max(build_s, self._build_s or 0.0)

    def _submit(self, fn: Callable, *args):
        """`fn(*args)` handed to the pool, opened if need be; a future. Every submit goes through the pool's own
        thread, which spawns a worker when none is idle (at most `workers`) and lives until the pool closes: Linux's
        parent-death signal follows the thread that spawned a worker, not its process (pool_worker.py)."""
        from concurrent.futures import Future

        if self._pool is None:
            self._open()
        reply: Future = Future()
        self._requests.put((fn, args, reply))
        future = reply.result()
        self.size = max(self.size, len(self.worker_pids()))
        return future

    def _open(self) -> None:
        import multiprocessing
        import queue
        from concurrent.futures import Future, ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        progress, requests, made = context.Queue(), queue.SimpleQueue(), Future()

        def own() -> None:
            try:
                pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=pool_worker.start,
                                           initargs=(os.getpid(), True, progress))
            except BaseException as error:
                made.set_exception(error)
                return
            made.set_result(pool)
            while (request := requests.get()) is not None:
                fn, args, reply = request
                try:
                    reply.set_result(pool.submit(fn, *args))
                except BaseException as error:
                    reply.set_exception(error)

        threading.Thread(target=own, name="memerobust-pool", daemon=True).start()
        self._pool, self._progress, self._requests = made.result(), progress, requests

    def note(self) -> str | None:
        """What the pool did, for the run's notes (None when no pass repaid its start and nothing was capped)."""
        capped = (f"--memerobust-workers={self.requested} capped at the {self.workers} usable "
                  f"core{'s' if self.workers > 1 else ''}" if self.requested > self.workers else "")
        worked = self.passes or self.fits or self.read_pictures
        if self.unstarted and not worked:
            return f"worker processes could not start ({self.unstarted}); every pass ran in this process"
        if not worked:
            return f"{capped}: no pass repaid starting worker processes; all ran in this process" if capped else None
        extras = ([f"{self.fits} universal attack fits"] if self.fits else []) + (
            [f"the OCR readings of {self.read_pictures} picture{'s' if self.read_pictures != 1 else ''}"]
            if self.read_pictures else [])
        done = (f"{self.shards} shard{'s' if self.shards != 1 else ''} of {self.passes} "
                f"pass{'es' if self.passes > 1 else ''}" + "".join(f" (and {extra})" for extra in extras)
                if self.passes else " and ".join(extras))
        here = f"; {self.here} more ran in this process while the workers started" if self.here else ""
        rerun = f"; a worker died, and {_named(self.rerun)} ran again on a new pool" if self.rerun else ""
        return (f"{done} ran on "
                f"{self.size} worker process{'es' if self.size != 1 else ''}, one thread each "
                f"({capped or '--memerobust-workers'}; the same numbers as one process){here}{rerun}")

    def _drain(self, tick) -> None:
        import queue

        while self._progress is not None:
            try:
                memes = self._progress.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            if tick is not None:
                tick(memes)

    def close(self) -> None:
        """End the workers (at once: a shard in flight is not waited for)."""
        self._close_pool()

    def _close_pool(self) -> None:
        if self._pool is None:
            return
        processes = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=10)
        self._requests.put(None)  # the pool's thread ends
        self._progress.close()
        self._pool = self._progress = self._requests = None


def _named(shards) -> str:
    """`shard 3 (memes 24-31)`, `shards 1, 2 (memes 8-23)`: shard tasks or indices, for errors and notes."""
    indices = [getattr(shard, "index", shard) for shard in shards]
    memes = [(shard.start, shard.stop - 1) for shard in shards if isinstance(shard, ShardTask)]
    span = f" (memes {min(a for a, _ in memes)}-{max(b for _, b in memes)})" if memes else ""
    return f"shard{'s' if len(indices) > 1 else ''} {', '.join(map(str, sorted(indices)))}{span}"


_pool_engines: dict = {}  # a pool worker's engines, by recipe key, each built once


def _pool_engine(recipe) -> tuple:
    """(the engine of `recipe`, built once in this worker; (seconds from this worker's spawn to its first engine
    built, seconds this call spent building) when this call built it, else (None, None))."""
    key = recipe_key(recipe)
    if key in _pool_engines:
        return _pool_engines[key], (None, None)
    first, began = not _pool_engines, time.monotonic()
    _pool_engines[key] = recipe()
    now = time.monotonic()
    return _pool_engines[key], (now - pool_worker.born if first else None, now - began)


def _evaluate_in_pool_worker(shared: bytes, task: ShardTask) -> tuple[ShardResult, tuple]:
    import pickle

    recipe, conditions, memo = pickle.loads(shared)
    tick = pool_worker.progress.put if pool_worker.progress is not None else None
    engine, timing = _pool_engine(recipe)
    result = evaluate_shard(engine, task, conditions, memo, tick)
    hold_for_tests(task.index)
    return result, timing


@dataclass(frozen=True)
class EncoderBatch:
    """One fixed-shape batch of an encoding handed to the pool (LocalPool.encode_batches)."""

    number: int
    length: int | None
    chunk: list


def _encode_in_pool_worker(shared: bytes, item: EncoderBatch) -> tuple[object, tuple]:
    """One fixed-shape batch encoded by this worker's encoder (built once from the recipe): (rows, timing)."""
    import pickle

    from ..determinism import fixed_threads

    recipe, modality, batch_size = pickle.loads(shared)
    encoder, timing = _pool_engine(recipe)
    encode = encoder.encode_texts if modality == "text" else encoder.encode_images
    with fixed_threads():
        return encode_batch(encode, item.chunk, item.length, batch_size), timing


OCR_CHUNK = 4  # pictures per OCR task handed to the pool (about 1.2 s each at 512 px on one CPU thread)


@dataclass(frozen=True)
class PictureChunk:
    """Pictures whose text a pool worker reads (LocalPool.ocr_readings)."""

    number: int
    pictures: list


def _read_in_pool_worker(shared: bytes, chunk: PictureChunk) -> tuple[list, tuple]:
    """The text boxes of a chunk of pictures, read by this worker's OCR reader (built once from the recipe)."""
    import pickle

    reader, timing = _pool_engine(pickle.loads(shared))
    return [reader.reading(picture) for picture in chunk.pictures], timing


def _fit_in_pool_worker(shared: bytes, side: tuple) -> tuple[tuple[dict, Exception | None], tuple]:
    """One universal attack fitted into a copy of the run's memo: ((its new entries, error or None), timing)."""
    import pickle

    recipe, memo = pickle.loads(shared)
    engine, timing = _pool_engine(recipe)
    fitted, error = fit_side(engine, side, memo)
    return (({} if error is not None else fitted), error), timing


def parse_ray_target(value: str) -> tuple[str | None, int | None]:
    """`auto` (the cluster this host belongs to, or a new local one), `local:N` (a new local cluster of N CPUs) or
    an ADDRESS (`host:port` or `ray://host:port`) -> (address for ray.init, CPUs of a new local cluster)."""
    value = value.strip()
    if value.startswith("local:"):
        try:
            cpus = int(value.removeprefix("local:"))
        except ValueError:
            cpus = 0
        if cpus < 1:
            raise ConfigError(f"--memerobust-ray={value}: local:N needs a number of CPUs >= 1, e.g. local:2")
        return None, cpus
    if value in ("", "local"):
        raise ConfigError("--memerobust-ray: give auto, local:N or a cluster's ADDRESS (host:port)")
    return value, None


# What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame. Ray's GCS and Ray Client
# are gRPC servers, which answer with a SETTINGS frame of their own (a 9-byte frame header of type 4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def check_reachable(target: str, address: str, timeout_s: float = 5.0) -> None:
    """A ConfigError unless something that speaks gRPC, as a Ray cluster does, answers at `address` (host:port, or
    ray://host:port) within `timeout_s`: Ray itself retries an address where nothing listens, or where something
    else does (a web server, a service that says nothing), for minutes. With RAY_USE_TLS the server speaks TLS
    first, so only the connection is checked."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--memerobust-ray={target}: expected auto, local:N or host:port")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as connection:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return
            connection.sendall(HTTP2_PREFACE)
            answer, closed = b"", False
            deadline = time.monotonic() + timeout_s
            while len(answer) < 9 and not closed and time.monotonic() < deadline:
                connection.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = connection.recv(64)
                except socket.timeout:
                    break
                except ConnectionResetError:
                    chunk = b""
                answer, closed = answer + chunk, not chunk
    except OSError as error:
        raise ConfigError(f"--memerobust-ray={target}: no Ray cluster answers at {host}:{port} "
                          f"({error.strerror or error}); start one with `ray start --head --port={port}`, or use "
                          f"--memerobust-ray=local:N for a cluster on this host") from None
    if len(answer) >= 9 and answer[3] == 4:  # the server's SETTINGS frame: a gRPC server, Ray's or not
        return
    if answer.strip():
        said = f"it answered {answer.decode('latin-1').strip().splitlines()[0][:40]!r}, not HTTP/2"
    else:
        said = "it closed the connection" if closed else f"it said nothing in {timeout_s:g} s"
    raise ConfigError(f"--memerobust-ray={target}: something listens at {host}:{port} but it is not a Ray cluster "
                      f"({said}); give the head node's address (`ray start --head --port=PORT`; ray://host:10001 for "
                      f"Ray Client), or use --memerobust-ray=local:N for a cluster on this host")


@contextlib.contextmanager
def signal_handlers_kept():
    """Keep this process's SIGTERM and SIGINT handlers across `ray.init`. Ray's SIGTERM handler for a driver tears the
    local cluster down and calls sys.exit from inside `ray.wait`, which ended pytest in a SIGABRT (exit 134) with
    nothing printed and Ray's agents left running. Kept, a signal ends a Ray run as it ends an in-process one: the
    plugin turns SIGTERM into pytest's interrupted path (plugin.Terminated), and `RayActors.close` shuts the cluster
    down on the way out. Outside pytest, with no handler set, SIGTERM ends the driver at once: Ray's GCS, raylet and
    workers die with it (Ray's fate sharing), its agents within a minute."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread sets handlers
        yield
        return
    kept = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in kept.items():
            if handler is not None and signal.getsignal(number) is not handler:  # None: set outside Python
                signal.signal(number, handler)


class RayActors:
    """A pool of Ray actors, each building the engine once (its detector loaded on its own GPU, or on `cpus`
    CPUs) from the engine's `recipe`, and evaluating the shards handed to it.

    `target`: see `parse_ray_target`. `actors`: how many (default: one per GPU of the cluster when `gpus`, else one
    per `cpus` CPUs of it). Connecting checks the cluster at once: one ConfigError names what is wrong (unreachable,
    no GPU where the run asks for one, Ray not installed), before any case runs."""

    name = "ray"

    def __init__(self, target: str, gpus: bool = False, actors: int | None = None, cpus: int = 1):
        try:
            import ray
        except ImportError as error:
            raise ConfigError(f"--memerobust-ray={target}: Ray is not installed ({error}); install the extra: "
                              f"pip install \"pytest-memerobust[ray]\"") from None
        self.ray = ray
        address, local_cpus = parse_ray_target(target)
        self.target, self.gpus, self.cpus = target, gpus, cpus
        self.worker_stats = CacheStats()  # what the shards did to the actors' feature stores (the run's note)
        self.started_here = False
        if not ray.is_initialized():
            if address not in (None, "auto"):
                check_reachable(target, address)
            try:
                with signal_handlers_kept():
                    if address == "auto":
                        try:
                            ray.init(address="auto", log_to_driver=False, configure_logging=False)
                        except ConnectionError:  # no cluster on this host: a local one of its CPUs
                            ray.init(address="local", include_dashboard=False, log_to_driver=False,
                                     configure_logging=False)
                    elif address is None:  # "local": a new cluster, even where another runs on this host
                        ray.init(address="local", num_cpus=local_cpus, include_dashboard=False, log_to_driver=False,
                                 configure_logging=False)
                    else:
                        ray.init(address=address, log_to_driver=False, configure_logging=False)
            except Exception as error:  # ConnectionError, RuntimeError, ValueError: Ray's words for "not there"
                raise ConfigError(f"--memerobust-ray={target}: cannot reach a Ray cluster there "
                                  f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})")
            self.started_here = True
        resources = ray.cluster_resources()
        if gpus and resources.get("GPU", 0) < 1:
            if self.started_here:
                ray.shutdown()
            raise ConfigError(f"--memerobust-ray={target}: the run asks for a GPU (--memerobust-device) but the "
                              f"cluster has none (resources: CPU {resources.get('CPU', 0):g}, GPU 0)")
        per_actor = "GPU" if gpus else "CPU"
        available = int(resources.get(per_actor, 0) // (1 if gpus else cpus))
        self.size = actors or max(1, available)
        self._actors: list = []
        self._actor_class = None

    def _pool(self) -> list:
        if not self._actors:
            worker = self.ray.remote(ShardWorker).options(
                num_gpus=1 if self.gpus else 0, num_cpus=0 if self.gpus else self.cpus,
                max_restarts=ACTOR_RESTARTS, max_task_retries=ACTOR_RESTARTS)
            self._actors = [worker.remote() for _ in range(self.size)]
        return self._actors

    def actor_pids(self) -> list[int]:
        """The actors' process ids (for tests that kill one)."""
        return self.ray.get([a.pid.remote() for a in self._pool()])

    def run(self, engine, tasks: list[ShardTask], conditions, tick=None) -> Iterator[ShardResult]:
        recipe = getattr(engine, "recipe", None)
        if recipe is None:  # an engine built by hand, not by a session: nothing to rebuild it from elsewhere
            yield from InProcess().run(engine, tasks, conditions, tick)
            return
        ray = self.ray
        shared = ray.put((recipe, list(conditions), engine.attack_memo()))
        todo, running = list(tasks), {}
        tasks_by_index = {task.index: task for task in tasks}
        for actor in self._pool():
            if todo:
                running[actor.evaluate.remote(shared, todo.pop(0))] = actor
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            actor = running.pop(done[0])
            result = ray.get(done[0])
            if tick is not None:
                tick(len(conditions) * (tasks_by_index[result.index].stop - tasks_by_index[result.index].start))
            self.worker_stats.add(result.accounting.store_stats)
            yield result
            if todo:
                running[actor.evaluate.remote(shared, todo.pop(0))] = actor

    def close(self) -> None:
        """Let the actors go, and the cluster too when this pool started it (its shutdown ends the actors, and
        every process of the cluster, without a warning per shard an interrupted run left in flight)."""
        if self.started_here:
            self.ray.shutdown()
        else:
            for actor in self._actors:
                self.ray.kill(actor)
        self._actors = []


class ShardWorker:
    """A Ray actor's state: the engines it built, by recipe, each with its detector loaded once."""

    def __init__(self):
        self.engines: dict = {}

    def pid(self) -> int:
        return os.getpid()

    def evaluate(self, shared: tuple, task: ShardTask) -> ShardResult:
        recipe, conditions, memo = shared
        key = recipe_key(recipe)
        if key not in self.engines:
            self.engines[key] = recipe()
        result = evaluate_shard(self.engines[key], task, conditions, memo)
        hold_for_tests(task.index)
        return result


def hold_for_tests(index: int) -> None:
    """Tests only, and inert unless the environment variable MEMEROBUST_TEST_HOLD names a folder: note
    `shard-N-pid-P` there once this process has evaluated shard N, then wait (at most HOLD_MAX_S) while a file
    `hold-N` exists there. A test so kills or signals an actor provably mid-shard: the shard evaluated, its result
    not yet handed back (tests/test_ray.py)."""
    folder = os.environ.get(HOLD_ENV)
    if not folder:
        return
    Path(folder, f"shard-{index}-pid-{os.getpid()}").touch()
    deadline = time.monotonic() + HOLD_MAX_S
    while Path(folder, f"hold-{index}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def recipe_key(recipe: Callable) -> str:
    """A recipe's identity across processes (the pickled bytes of a partial's function and arguments)."""
    import hashlib
    import pickle

    return hashlib.sha256(pickle.dumps(recipe)).hexdigest()


class SharedFolder:
    """Shards split between the pytest-xdist workers of one run through a folder they all see: a worker claims each
    shard nobody has claimed (an exclusive create), evaluates it and leaves its result there, then reads the shards
    the others evaluated. Every worker so ends with the whole pass, having computed its share of it; a worker that
    dies leaves its claim to be taken over. The folder is the run's (pytest-xdist's run id); the controller removes
    it at the end."""

    name = "xdist"
    POLL_S = 0.2

    def __init__(self, folder: Path, wait_s: float = 6 * 3600):
        self.folder, self.wait_s = Path(folder), wait_s

    def run(self, engine, tasks: list[ShardTask], conditions, tick=None) -> Iterator[ShardResult]:
        import hashlib

        what = repr((engine.label, [c.id for c in conditions])).encode()
        folder = self.folder / hashlib.sha256(what).hexdigest()[:24]
        folder.mkdir(parents=True, exist_ok=True)

        def read(task):
            result = _read_result(folder / f"{task.index}.result")
            if result is not None and tick is not None:
                tick(len(conditions) * (task.stop - task.start))
            return result

        yield from self._claimed(tasks, lambda task: folder / f"{task.index}.claim",
                                 lambda task: self._evaluated(engine, folder, task, conditions, tick), read,
                                 lambda waiting: f"shards {[task.index for task in waiting]} of {folder}")

    def fit(self, engine, sides: list[tuple]):
        """Universal attacks split between the workers as the shards are: each fits the sides it claims (the
        longest first) and leaves what it fitted in the folder; it reads the others' fits into the engine's memo
        (a fit at one thread gives the same bytes in any process). Before, every worker fitted every side. Yields
        (side, error or None) as each is had."""
        import hashlib

        if not sides:
            return
        memo = engine.attack_memo()
        folder = self.folder / hashlib.sha256(repr(("fits", engine.label)).encode()).hexdigest()[:24]
        folder.mkdir(parents=True, exist_ok=True)
        paths = {side: folder / hashlib.sha256(repr(side).encode()).hexdigest()[:24] for side in sides}

        def read(side):
            found = _read_result(paths[side].with_suffix(".fit"))
            if found is None:
                return None
            fitted, error = found
            for key, value in fitted.items():
                memo.setdefault(key, value)
            return side, error

        yield from self._claimed(sorted(sides, key=lambda side: -(side[2] or 0)),
                                 lambda side: paths[side].with_suffix(".claim"),
                                 lambda side: (side, self._fitted(engine, paths[side], side)), read,
                                 lambda waiting: f"universal attack fits {waiting} in {folder}")

    def _claimed(self, items: list, claim: Callable, compute: Callable, read: Callable, what: Callable):
        """Each item's outcome as it is had: `compute(item)` here for each item this process claims (or whose
        claimant died), else `read(item)` once its claimant has left it there (None until then)."""
        others = []
        for item in items:
            if _claim(claim(item)):
                yield compute(item)
            else:
                others.append(item)
        deadline = time.monotonic() + self.wait_s
        while others:
            waiting = []
            for item in others:
                found = read(item)
                if found is not None:
                    yield found
                elif not _claimant_alive(claim(item)):  # it died: the item is ours now
                    yield compute(item)
                else:
                    waiting.append(item)
            others = waiting
            if others:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what(others)} were claimed by a worker that gave no result in "
                                       f"{self.wait_s:.0f} s")
                time.sleep(self.POLL_S)

    @staticmethod
    def _fitted(engine, path: Path, side: tuple) -> Exception | None:
        """Fit `side` into the engine's memo here, and leave its new entries (and its error) at `path`.fit."""
        import pickle

        from ..atomic import atomic_path

        fitted, error = fit_side(engine, side)
        try:
            payload = pickle.dumps((fitted, error), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # an error that does not pickle: the others get its text (else they would wait for ever)
            payload = pickle.dumps((fitted, RuntimeError(f"{type(error).__name__}: {error}")))
        with atomic_path(path.with_suffix(".fit")) as tmp:
            Path(tmp).write_bytes(payload)
        return error

    def close(self) -> None:
        """Nothing to let go: the controller removes the run's folder once every worker is done."""

    @staticmethod
    def _evaluated(engine, folder: Path, task: ShardTask, conditions, tick=None) -> ShardResult:
        import pickle

        from ..atomic import atomic_path

        result = evaluate_shard(engine, task, conditions, tick=tick)
        with atomic_path(folder / f"{task.index}.result") as tmp:
            with open(tmp, "wb") as f:
                pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
        return result


def _claim(path: Path) -> bool:
    """Claim a shard: True for the one process whose exclusive create succeeded (it writes its process id)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{socket.gethostname()} {os.getpid()}")
    return True


def _claimant_alive(path: Path) -> bool:
    """Whether the process that claimed a shard still runs (on another host: assumed so)."""
    try:
        host, pid = path.read_text().split()
    except (OSError, ValueError):
        return True  # being written
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_result(path: Path):
    """A shard's result (or a fit's) another process left at `path`; None while there is none."""
    import pickle

    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None
