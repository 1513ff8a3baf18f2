"""Hosted endpoints at their edges (issue 50): the key in every spelling a server echoes it in, never printed nor
cached; a request bounded in time from connect to last byte; a dead endpoint that stops the run; Retry-After; a
reply bounded in size; `samples` bounded. Servers here listen on 127.0.0.1 only and are stopped by each test."""
from __future__ import annotations

import base64
import json
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest

from pytest_memerobust.detectors import ModelCard, Network, Scoring
from pytest_memerobust.detectors.hosted import EndpointError, HostedDetector
from pytest_memerobust.errors import ConfigError
from test_hosted import PICTURE, _reply, _serve, card

KEY = "plainLocalKey/Hunter2+zz"  # a key with the characters encoders escape: / and +


def _spellings(key: str) -> dict[str, str]:
    """The key as servers and libraries echo it."""
    return {
        "literal": key,
        "json, escaped slash": json.dumps(key).strip('"').replace("/", "\\/"),
        "json, \\u escapes": "".join(f"\\u{ord(c):04x}" if not c.isalnum() else c for c in key),
        "url-encoded": urllib.parse.quote(key, safe=""),
        "url-encoded twice": urllib.parse.quote(urllib.parse.quote(key, safe=""), safe=""),
        "form-encoded": urllib.parse.quote_plus(key),
        "base64": base64.b64encode(key.encode()).decode(),
        "base64 url-safe": base64.urlsafe_b64encode(key.encode()).decode(),
        "basic user:key": base64.b64encode(f"apiuser:{key}".encode()).decode(),
        "basic x:key": base64.b64encode(f"x:{key}".encode()).decode(),
    }


def _leaks(text: str, key: str = KEY) -> list[str]:
    """Which spellings of `key` (or of its first 8 characters, or its base64 core) `text` still holds."""
    found = [name for name, spelled in _spellings(key).items() if spelled in text]
    found += ["its first 8 characters"] * (key[:8] in text)
    found += ["its base64 core"] * (base64.b64encode(key.encode()).decode()[:12] in text)
    return found


@pytest.mark.parametrize("spelling", list(_spellings(KEY)))
def test_the_key_is_redacted_in_every_spelling_a_server_echoes(spelling):
    """Only the literal key was replaced: `plainLocalKey\\/Hunter2+zz` and a base64 echo were printed as they were."""
    from pytest_memerobust.detectors.hosted import redact

    spelled = _spellings(KEY)[spelling]
    shown = redact(f'{{"error": "invalid key {spelled}", "hint": "see docs"}}', [KEY])
    assert _leaks(shown) == [] and shown.startswith('{"error": "invalid key ***') and '"hint": "see docs"' in shown


def test_a_key_cut_where_a_message_was_clipped_leaves_no_prefix():
    from pytest_memerobust.detectors.hosted import redact

    for cut in (8, 12, len(KEY) - 1):
        for spelled in (KEY[:cut], json.dumps(KEY)[1 : cut + 1].replace("/", "\\/")):
            assert _leaks(redact(f"bad key: {spelled}", [KEY])) == [], spelled
    assert redact("short plain words", [KEY]) == "short plain words"  # 5 shared letters are not the key


class Scripted(BaseHTTPRequestHandler):
    """Answers by caption: "echo" -> 401 whose body holds the key in every spelling; "debug" -> a valid 200 reply
    whose debug field and content hold it too; "busy" -> 429 with Retry-After: 2 on the first try; "huge N" -> a
    valid reply padded to N bytes; anything else -> Yes. Every request's (time, caption) is logged."""

    log: list[tuple[float, str]] = []
    key = ""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        caption = body["messages"][-1]["content"][1]["text"].split('"')[1]
        first = all(c != caption for _, c in self.log)
        self.log.append((time.time(), caption))
        spellings = " ".join(_spellings(self.key).values())
        if caption == "echo":
            return self._send(401, json.dumps({"error": {"message": f"Incorrect API key: {spellings}"}}).encode()
                              .replace(b"\\\\", b"\\"))
        if caption == "busy" and first:
            return self._send(429, b'{"error": "slow down"}', {"Retry-After": "2"})
        reply = _reply("Yes", [{"token": "Yes", "logprob": -0.1}, {"token": "No", "logprob": -2.4}])
        if caption == "debug":
            reply["debug"] = {"authorization": f"Bearer {self.key}", "echo": spellings}
            reply["choices"][0]["message"]["content"] = f"Yes ({spellings})"
        payload = json.dumps(reply).encode().replace(b"\\\\", b"\\")  # as a server writes them, not re-escaped
        if caption.startswith("huge"):
            payload = payload[:-1] + b', "pad": "' + b"x" * int(caption.split()[1]) + b'"}'
        self._send(200, payload)

    def _send(self, status: int, payload: bytes, headers=None):
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(payload)),
                            **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def scripted(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    Scripted.log, Scripted.key = [], KEY
    server = _serve(Scripted)
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_an_error_body_echoing_the_key_in_any_spelling_is_redacted(scripted):
    with pytest.raises(EndpointError) as err:
        HostedDetector(card(scripted)).predict_proba([PICTURE], ["echo"])
    message = str(err.value)
    assert "refused the request: HTTP 401" in message and "Incorrect API key: ***" in message, message
    assert _leaks(message) == [], message


def test_a_valid_reply_carrying_the_key_is_redacted_before_it_is_cached(scripted, tmp_path):
    """A 200 reply whose debug field and content held the key was cached verbatim under the cache's hosted/ folder
    (malformed replies were redacted, valid ones not); it is still read as a reply."""
    detector = HostedDetector(card(scripted))
    detector.use_cache(tmp_path)
    proba, abstained = detector.predict_with_abstentions([PICTURE], ["debug"])
    np.testing.assert_allclose(proba[0], np.exp([-2.4, -0.1]) / np.exp([-2.4, -0.1]).sum())
    cached = [p.read_text() for p in (tmp_path / "hosted").rglob("*.json")]
    assert len(cached) == 1 and "***" in cached[0] and _leaks(cached[0]) == [], cached
    assert json.loads(cached[0])["choices"][0]["message"]["content"].startswith("Yes (***")
    again = HostedDetector(card(scripted))
    again.use_cache(tmp_path)
    assert again.predict_proba([PICTURE], ["debug"]).tolist() == proba.tolist() and len(Scripted.log) == 1


def test_an_answer_cached_with_the_key_before_is_redacted_when_read(scripted, tmp_path):
    """Entries an older version cached verbatim are cleaned on their way in."""
    detector = HostedDetector(card(scripted))
    detector.use_cache(tmp_path)
    detector.predict_proba([PICTURE], ["plain"])
    (path,) = (tmp_path / "hosted").rglob("*.json")
    reply = json.loads(path.read_text())
    reply["debug"] = f"key {KEY.replace('/', '%2F')}"
    path.write_text(json.dumps(reply))
    assert _leaks(json.dumps(detector.answer(PICTURE, "plain"))) == [] and len(Scripted.log) == 1


@pytest.mark.parametrize("query", ["api_key=sk-abcdef0123456789", "key=AIzaSyA-secret-value", "token=t0k3n-v4lue",
                                   "x=1&access_token=ya29.secret", "api-version=2024-06-01&Api-Key=secret-value"])
def test_a_credential_in_the_base_url_query_is_refused_at_card_load(query):
    """A key in base_url's query string was redacted in the terminal but copied into r.json."""
    with pytest.raises(ConfigError) as err:
        HostedDetector(card(f"https://example.invalid/v1?{query}"))
    message = str(err.value)
    name = query.rpartition("&")[2].partition("=")[0]
    assert f"query string ({name}=...)" in message and "$OPENAI_API_KEY" in message, message
    assert query.rpartition("=")[2] not in message, message


def test_a_base_url_with_a_harmless_query_is_taken():
    assert HostedDetector(card("https://example.invalid/v1?api-version=2024-06-01")).base_url.endswith("2024-06-01")


def test_retry_after_sets_the_wait_before_the_next_try(scripted, monkeypatch):
    """HTTP 429 was retried after the backoff's 0.5 s whatever the server asked."""
    from types import SimpleNamespace

    from pytest_memerobust.detectors import hosted

    waits = []
    monkeypatch.setattr(hosted, "time", SimpleNamespace(sleep=waits.append, monotonic=time.monotonic, time=time.time))
    assert HostedDetector(card(scripted)).predict_proba([PICTURE], ["busy"]).shape == (1, 2)
    assert waits == [2.0] and [c for _, c in Scripted.log] == ["busy", "busy"]


def test_a_reply_beyond_max_reply_bytes_is_an_error_and_never_cached(scripted, tmp_path):
    """A 50 MB reply was read and cached whole (801 MB for 16 memes)."""
    from pytest_memerobust.detectors.hosted import MAX_REPLY_BYTES

    detector = HostedDetector(card(scripted, max_reply_bytes=100_000))
    detector.use_cache(tmp_path)
    assert detector.predict_proba([PICTURE], ["huge 50000"]).shape == (1, 2)  # within the limit: read and cached
    with pytest.raises(EndpointError, match=r"sent a reply longer than 100000 bytes \(max_reply_bytes\)"):
        detector.predict_proba([PICTURE], ["huge 200000"])
    default = HostedDetector(card(scripted))
    default.use_cache(tmp_path)
    with pytest.raises(EndpointError, match=rf"longer than {MAX_REPLY_BYTES} bytes"):
        default.predict_proba([PICTURE], [f"huge {MAX_REPLY_BYTES}"])
    assert len(list((tmp_path / "hosted").rglob("*.json"))) == 1  # the first alone


@pytest.mark.parametrize("params, culprit", [
    ({"max_reply_bytes": 0}, "max_reply_bytes must be a whole number >= 1"),
    ({"max_requests": 2.5}, "max_requests must be a whole number >= 1"),
    ({"retries": 1.5}, "retries must be a whole number"),
    ({"timeout_s": 0}, "timeout_s must be a number > 0"),
])
def test_a_bad_bound_on_a_hosted_card_is_one_error_naming_the_key(params, culprit):
    with pytest.raises(ConfigError) as err:
        HostedDetector(card("http://127.0.0.1:1/v1", **params))
    assert culprit in str(err.value)


def test_samples_beyond_what_a_user_can_mean_is_one_error_naming_the_key_and_the_cap():
    """`samples = 1000000` was accepted: on a hosted card, a million requests per meme and condition."""
    from pytest_memerobust.detectors.sampling import MAX_SAMPLES, Sampling

    with pytest.raises(ConfigError, match=rf"samples = 1000000 is more than {MAX_SAMPLES}"):
        Sampling.from_card(ModelCard(name="s", architecture="hosted", classes=("a", "b"),
                                     scoring=Scoring(samples=1000000)))
    assert Sampling.from_card(ModelCard(name="s", architecture="hosted", classes=("a", "b"),
                                        scoring=Scoring(samples=MAX_SAMPLES))).k == MAX_SAMPLES


# --- time: a total deadline per request, and a breaker for a dead endpoint ------------------------------------------


class Dripping:
    """A server on 127.0.0.1 that answers each connection by sending a valid reply one byte at a time, a byte per
    `every` seconds (its headers too, with `headers=True`), and counts the bytes it got out before the client went
    away. Its loops are bounded by the reply's length."""

    def __init__(self, every: float, headers: bool):
        self.every, self.headers, self.sent, self.connections = every, headers, [], 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn):
        body = json.dumps(_reply("Yes", None)).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        sent = 0
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)  # the request (small enough for one read here)
                if not self.headers:
                    conn.sendall(head)
                for byte in (head if self.headers else b"") + body:
                    if not self.running:
                        break
                    conn.sendall(bytes([byte]))
                    sent += 1
                    time.sleep(self.every)
            except OSError:
                pass
        self.sent.append(sent)

    def stop(self):
        self.running = False
        self.thread.join(timeout=5)
        self.listener.close()


@pytest.mark.parametrize("drips", ["body", "headers"])
def test_a_reply_dripped_a_byte_at_a_time_ends_at_the_request_deadline(drips):
    """With timeout_s = 3, an endpoint sending a byte every 2 s held one request open for 148 s and more: the timeout
    bounded each socket read, not the request. Here a byte every 0.05 s of a reply of ~200 bytes: 10 s, each read
    well within a 0.5 s socket timeout; the deadline ends the request after 0.5 s, about 10 bytes in."""
    server = Dripping(0.05, headers=drips == "headers")
    try:
        detector = HostedDetector(card(server.url, timeout_s=0.5, retries=0))
        with pytest.raises(EndpointError, match=r"did not answer after 1 tries \(last: TimeoutError: no whole reply "
                                                r"within 0.5 s \(the card's timeout_s\)\)"):
            detector.predict_proba([PICTURE], ["yes"])
        deadline = time.monotonic() + 5
        while not server.sent and time.monotonic() < deadline:  # the server notices the closed connection
            time.sleep(0.05)
        whole = len(json.dumps(_reply("Yes", None))) + (90 if drips == "headers" else 0)
        assert server.connections == 1 and server.sent and server.sent[0] < whole / 2, (server.sent, whole)
    finally:
        server.stop()


class Silent:
    """A server on 127.0.0.1 that accepts connections and never answers (a hung backend behind a live proxy); it
    counts the connections and closes them when stopped."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.held, self.running = [], True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                self.held.append(self.listener.accept()[0])
            except OSError:
                continue

    def stop(self):
        self.running = False
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()
        self.listener.close()


def test_a_dead_endpoint_opens_the_breaker_and_every_later_request_fails_at_once(tmp_path):
    """With no breaker, each meme retried on its own (about 6 minutes a case at the defaults, 19 hours for the main
    job). Three tries in a row failed: down, in this process and in any other that shares the run's folder."""
    from pytest_memerobust.errors import EndpointDown

    server = Silent()
    try:
        detector = HostedDetector(card(server.url, timeout_s=0.2, retries=5))
        detector.use_run_folder(tmp_path)
        with pytest.raises(EndpointDown, match=r"model 'fake-vlm'\) is down: 3 tries in a row failed from .* UTC to "
                                               r".* UTC \(last: TimeoutError: no whole reply within 0.2 s "
                                               r"\(the card's timeout_s\)\); no more requests are sent to it and "
                                               r"the run stops here"):
            detector.predict_proba([PICTURE] * 4, ["a", "b", "c", "d"])
        assert len(server.held) == 3
        with pytest.raises(EndpointDown):
            detector.predict_proba([PICTURE], ["e"])
        other = HostedDetector(card(server.url, timeout_s=0.2, retries=5))  # another process of the run
        other.use_run_folder(tmp_path)
        with pytest.raises(EndpointDown, match="is down: 3 tries in a row"):
            other.predict_proba([PICTURE], ["f"])
        assert len(server.held) == 3 and detector.usage["requests"] == 3
    finally:
        server.stop()


def test_at_the_cards_defaults_a_dead_endpoint_stops_the_run_within_a_minute():
    """The breaker opens after BREAKER_FAILURES timeouts and the backoffs between them: at the default timeout_s (60
    before) a dead endpoint that accepts connections held the run 3 minutes before it said so."""
    from pytest_memerobust.detectors.endpoint_guard import BREAKER_FAILURES

    params = {"base_url": "http://127.0.0.1:9/v1", "model": "fake-vlm"}
    detector = HostedDetector(ModelCard(name="defaults", architecture="hosted", classes=("no", "yes"),
                                        network=Network(params=params)))
    backoffs = sum(min(30.0, 0.5 * 2 ** attempt) for attempt in range(BREAKER_FAILURES - 1))
    assert BREAKER_FAILURES * detector.timeout_s + backoffs < 60


def _card_file(path, url: str, **params) -> str:
    lines = ['name = "fake-hosted"', 'architecture = "hosted"', 'classes = ["non-hateful", "hateful"]', "[params]",
             f'base_url = "{url}"', 'model = "fake-vlm"', *(f"{k} = {json.dumps(v)}" for k, v in params.items())]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_run_against_a_dead_endpoint_stops_at_its_first_case_saying_so(pytester):
    """Every case retried a dead endpoint on its own; now the first one that finds it down stops the run."""
    server = Silent()
    try:
        model = _card_file(pytester.path / "dead.toml", server.url, timeout_s=0.2, retries=5, requests_per_second=0)
        result = pytester.runpytest(f"--memerobust-model={model}", "--memerobust-limit=4", "-p", "no:cacheprovider",
                                    "-k", "rainbow and (typos-3 or imagenet_c-3) and not hotflip and not universal")
        assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
        result.stdout.fnmatch_lines(["*Interrupted: memerobust: *chat/completions (model 'fake-vlm') is down: 3 tries "
                                     "in a row failed*"])
        assert result.parseoutcomes().get("failed") == 1 and "passed" not in result.parseoutcomes()
        assert len(server.held) == 3
    finally:
        server.stop()


def test_a_trip_ends_the_requests_other_threads_have_in_flight():
    """The engine asks the endpoint from a background thread too (an attack perturbing ahead): once one thread found
    the endpoint down, another waited out its own timeout (15 s at timeout_s = 15) before the run could stop."""
    from pytest_memerobust.detectors import endpoint_guard
    from pytest_memerobust.errors import EndpointDown

    breaker = endpoint_guard.Breaker("the endpoint", span=0.0)
    in_flight = endpoint_guard.Deadline(60.0)
    with in_flight, breaker.watching(in_flight):
        for _ in range(endpoint_guard.BREAKER_FAILURES - 1):
            breaker.failed("TimeoutError")
        assert not in_flight.expired
        with pytest.raises(EndpointDown, match="the endpoint is down: 3 tries in a row failed"):
            breaker.failed("TimeoutError")
        assert in_flight.expired and in_flight.left() > 50
    with pytest.raises(EndpointDown):  # what the ended request's thread meets next
        breaker.failed("TimeoutError: no whole reply within 60 s")


def test_a_request_in_flight_ends_when_another_process_finds_the_endpoint_down(tmp_path):
    """A pool worker fitting an attack kept waiting out its timeout after the driver found the endpoint down."""
    from pytest_memerobust.detectors import endpoint_guard
    from pytest_memerobust.errors import EndpointDown

    here = endpoint_guard.Breaker("the endpoint", span=0.0, path=tmp_path / "e.down")
    there = endpoint_guard.Breaker("the endpoint", span=0.0, path=tmp_path / "e.down")  # another process's
    in_flight = endpoint_guard.Deadline(60.0, there.found_down)
    with in_flight:
        for _ in range(endpoint_guard.BREAKER_FAILURES - 1):
            here.failed("HTTP 502")
        assert not in_flight.expired and not there.found_down()
        with pytest.raises(EndpointDown):
            here.failed("HTTP 502")
        for _ in range(100):  # it looks every ABANDON_POLL_S
            if in_flight.expired:
                break
            time.sleep(0.05)
        assert in_flight.expired and in_flight.left() > 50
    with pytest.raises(EndpointDown, match="the endpoint is down: 3 tries in a row failed .* HTTP 502"):
        there.check()
