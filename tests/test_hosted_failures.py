"""A hosted endpoint failing in ways a run must not hide (issue 62): a Retry-After of an hour, which held each case 60 s
a try and never ended the run; a NaN or infinite logprob, which ended in a bare ValueError; a reply that could not be
parsed, which was cached like a good one; and an exception of the send quoting the Authorization header, which
reached the terminal and the JUnit XML with the key. Servers here listen on 127.0.0.1 only and are stopped by each
test; nothing sleeps: the patience check comes before any wait."""
from __future__ import annotations

import calendar
import email.utils
import json
import re
import time
import traceback
import urllib.error
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_memerobust.detectors import hosted
from pytest_memerobust.detectors.endpoint_guard import RETRY_AFTER_MAX_S
from pytest_memerobust.detectors.hosted import EndpointError, HostedDetector
from pytest_memerobust.errors import EndpointDown
from test_hosted import PICTURE, _reply, _serve, card
from test_hosted_edges import KEY, Scripted, _card_file, _leaks

NOW_PLUS_HOUR = "date"  # the Retry-After of caption "wait date": an HTTP date an hour ahead


def ones_reply() -> dict:
    """A valid reply full of 1s, as a local server whose key is "1" sends them."""
    reply = _reply("Yes", [{"token": "Yes", "logprob": -0.1}, {"token": "1", "logprob": -3.1},
                           {"token": "No", "logprob": -2.41}])
    reply.update(id="chatcmpl-1111", created=1700000001, system_fingerprint="fp_1_1")
    reply["usage"] = {"prompt_tokens": 111, "completion_tokens": 1, "total_tokens": 112}
    return reply


class Failing(Scripted):
    """Answers by caption (or `every`'s caption for any request): "wait N" -> HTTP 429 with Retry-After: N ("wait
    date": 503 with an HTTP date an hour ahead); "nan", "inf", "-inf", "nan text" -> Yes with that logprob (the
    last as the string "NaN"); "html once" -> a proxy's HTML page on the first try, then Yes; "cut once" -> JSON cut
    short on the first try, then Yes; "ones" -> `ones_reply()`; anything else -> Yes (logprob -0.1, No -2.3). Every
    request's caption is logged."""

    log: list[str] = []
    every = ""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        caption = self.every or body["messages"][-1]["content"][1]["text"].split('"')[1]
        first = caption not in self.log
        self.log.append(caption)
        if caption.startswith("wait"):
            asked = caption.split()[1]
            if asked == NOW_PLUS_HOUR:
                return self._send(503, b'{"error": "maintenance"}',
                                  {"Retry-After": email.utils.formatdate(time.time() + 3600, usegmt=True)})
            return self._send(429, b'{"error": "slow down"}', {"Retry-After": asked})
        if caption.endswith("once") and first:
            return self._send(200, b"<html><body><h1>502 Bad Gateway</h1> nginx</body></html>" if
                              caption.startswith("html") else json.dumps(ones_reply()).encode()[:70])
        if caption == "ones":
            return self._send(200, json.dumps(ones_reply()).encode())
        logprob = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity", "nan text": '"NaN"'}.get(caption, "-0.1")
        text = json.dumps(_reply("Yes", [{"token": "Yes", "logprob": -0.1}, {"token": "No", "logprob": -2.3}]))
        self._send(200, text.replace('"logprob": -0.1', f'"logprob": {logprob}').encode())


@pytest.fixture
def failing(monkeypatch):
    """The server's base URL; the key is KEY; hosted.py's sleeps are recorded, never slept."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    Failing.log, Failing.every = [], ""
    slept: list[float] = []
    monkeypatch.setattr(hosted, "time", SimpleNamespace(sleep=slept.append, monotonic=time.monotonic, time=time.time))
    server = _serve(Failing)
    yield SimpleNamespace(url=f"http://127.0.0.1:{server.server_address[1]}/v1", slept=slept)
    server.shutdown()
    server.server_close()


# --- 1. a Retry-After beyond what the run waits ---------------------------------------------------------------------

ASKED = re.compile(r"asked \(HTTP (\d+), Retry-After\) to be called again in ([\d,]+) s, at (\d{4}-\d\d-\d\d \d\d:\d\d:"
                   r"\d\d) UTC: longer than the 60 s a run waits; no more requests are sent to it and the run stops "
                   r"here$")


@pytest.mark.parametrize("caption, status", [("wait 3600", 429), (f"wait {NOW_PLUS_HOUR}", 503)])
def test_a_retry_after_of_an_hour_stops_the_run_at_once_saying_when(failing, tmp_path, caption, status):
    """Each try waited RETRY_AFTER_MAX_S (60 s) and said only "(last: HTTP 429)"; the run never ended."""
    detector = HostedDetector(card(failing.url, retries=5))
    detector.use_run_folder(tmp_path)
    asked_at = time.time()
    with pytest.raises(EndpointDown) as err:
        detector.predict_proba([PICTURE] * 3, [caption, "b", "c"])
    message = str(err.value)
    said = ASKED.search(message)
    assert said and message.startswith(f"{failing.url}/chat/completions (model 'fake-vlm') asked"), message
    seconds, when = int(said[2].replace(",", "")), calendar.timegm(time.strptime(said[3], "%Y-%m-%d %H:%M:%S"))
    assert int(said[1]) == status and 3595 <= seconds <= 3600 and abs(when - (asked_at + 3600)) <= 5, message
    assert message.count("UTC") == 1 and message.count(said[2]) == 1, message  # said once
    assert Failing.log == [caption] and failing.slept == []  # one request, no wait
    with pytest.raises(EndpointDown, match=re.escape(message)):  # the run's later cases: at once, nothing sent
        detector.predict_proba([PICTURE], ["d"])
    other = HostedDetector(card(failing.url, retries=5))  # another process of the run (a pool or xdist worker)
    other.use_run_folder(tmp_path)
    with pytest.raises(EndpointDown, match=re.escape(message)):
        other.predict_proba([PICTURE], ["e"])
    assert Failing.log == [caption] and detector.usage["requests"] == 1


def test_a_retry_after_within_what_the_run_waits_is_waited_and_named_when_the_tries_run_out(failing):
    detector = HostedDetector(card(failing.url, retries=1))
    with pytest.raises(EndpointError, match=r"did not answer after 2 tries \(last: HTTP 429, Retry-After 60 s\)$"):
        detector.predict_proba([PICTURE], [f"wait {RETRY_AFTER_MAX_S:g}"])
    assert failing.slept == [RETRY_AFTER_MAX_S] and len(Failing.log) == 2


def test_a_run_against_an_endpoint_asking_for_an_hour_stops_at_its_first_case(pytester, failing):
    Failing.every = "wait 3600"
    model = _card_file(pytester.path / "busy.toml", failing.url, requests_per_second=0, retries=5)
    started = time.monotonic()
    result = pytester.runpytest(f"--memerobust-model={model}", "--memerobust-limit=4", "-p", "no:cacheprovider",
                                "--memerobust-bootstrap=20",
                                "-k", "rainbow and (typos-3 or imagenet_c-3) and not hotflip and not universal")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    result.stdout.fnmatch_lines(["*Interrupted: memerobust: http://127.0.0.1:*/v1/chat/completions (model 'fake-vlm') "
                                 "asked (HTTP 429, Retry-After) to be called again in 3,600 s, at * UTC: longer "
                                 "than the 60 s a run waits; no more requests are sent to it and the run stops here*"])
    assert result.parseoutcomes().get("failed") == 1 and "passed" not in result.parseoutcomes(), out
    assert len(Failing.log) == 1 and failing.slept == [] and time.monotonic() - started < 120


# --- 2 and 3. replies that cannot be read: abstentions, never cached --------------------------------------------------


def test_a_nan_or_infinite_logprob_is_an_abstention_naming_it_and_minus_infinity_a_zero(failing, tmp_path):
    """NaN and Infinity (which Python's json reads) ended the run's tables in "ValueError: proba contains NaN"."""
    detector = HostedDetector(card(failing.url, abstain_below=0))
    detector.use_cache(tmp_path)
    captions = ["nan", "inf", "nan text", "-inf", "yes"]
    proba, abstained = detector.predict_with_abstentions([PICTURE] * 5, captions)
    assert abstained.tolist() == [True, True, True, False, False] and np.isfinite(proba).all()
    np.testing.assert_allclose(proba[3:], [[1.0, 0.0], np.exp([-2.3, -0.1]) / np.exp([-2.3, -0.1]).sum()])
    note = detector.run_note()
    assert ("; 3 replies could not be read (the first: the logprob of the candidate token 'Yes' is nan, not a finite "
            "number): abstentions, not cached, so a re-run asks again") in note, note
    assert len(list((tmp_path / "hosted").rglob("*.json"))) == 2  # -inf and yes
    again = HostedDetector(card(failing.url, abstain_below=0))
    again.use_cache(tmp_path)
    assert again.predict_with_abstentions([PICTURE] * 5, captions)[1].tolist() == [True, True, True, False, False]
    assert Failing.log == captions + captions[:3] and again.usage["cached"] == 2
    assert "the logprob of the candidate token 'Yes' is inf, not a finite number" in hosted.unreadable(
        again.answer(PICTURE, "inf"))


@pytest.mark.parametrize("caption, why", [("html once", "not JSON: <html><body><h1>502 Bad Gateway</h1> nginx"),
                                          ("cut once", 'not JSON: {"choices": [{"index": 0')])
def test_a_reply_that_could_not_be_parsed_is_not_cached_and_a_rerun_asks_again(failing, tmp_path, caption, why):
    """A proxy's error page and a reply cut short were cached like good replies: one bad minute of the endpoint
    stayed an abstention in every later run until the cache was deleted by hand."""
    detector = HostedDetector(card(failing.url))
    detector.use_cache(tmp_path)
    assert detector.predict_with_abstentions([PICTURE], [caption])[1].tolist() == [True]
    assert list((tmp_path / "hosted").rglob("*.json")) == [] and f"(the first: {why}" in detector.run_note()
    rerun = HostedDetector(card(failing.url))
    rerun.use_cache(tmp_path)
    proba, abstained = rerun.predict_with_abstentions([PICTURE], [caption])
    assert abstained.tolist() == [False] and proba[0].argmax() == 1 and Failing.log == [caption] * 2
    third = HostedDetector(card(failing.url))
    third.use_cache(tmp_path)
    assert third.predict_proba([PICTURE], [caption]).tolist() == proba.tolist() and len(Failing.log) == 2


def test_an_unreadable_reply_an_older_version_cached_is_asked_again(failing, tmp_path):
    detector = HostedDetector(card(failing.url))
    detector.use_cache(tmp_path)
    path = detector._cache_path(PICTURE, "yes")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"malformed": "<html>502 Bad Gateway</html>"}))
    assert detector.predict_with_abstentions([PICTURE], ["yes"])[1].tolist() == [False]
    assert Failing.log == ["yes"] and "choices" in json.loads(path.read_text())


def test_a_one_character_key_leaves_what_is_cached_as_the_server_sent_it(failing, tmp_path, monkeypatch):
    """A local vLLM server's key "1": redacting it in a reply would hide every 1 of the logprobs and counts."""
    monkeypatch.setenv("OPENAI_API_KEY", "1")
    detector = HostedDetector(card(failing.url))
    detector.use_cache(tmp_path)
    proba = detector.predict_proba([PICTURE], ["ones"])
    (path,) = (tmp_path / "hosted").rglob("*.json")
    assert json.loads(path.read_text()) == ones_reply() and detector.usage["input_tokens"] == 111
    again = HostedDetector(card(failing.url))
    again.use_cache(tmp_path)
    assert again.answer(PICTURE, "ones") == ones_reply() and again.predict_proba([PICTURE], ["ones"]).tolist() == \
        proba.tolist() and Failing.log == ["ones"]
    np.testing.assert_allclose(proba[0], np.exp([-2.41, -0.1]) / np.exp([-2.41, -0.1]).sum())


# --- 4. an exception of the send that quotes the headers --------------------------------------------------------------


def _raising(exc: BaseException):
    """A HostedDetector._send that raises `exc` from inside an except block, as http.client's own errors come."""
    def send(self, url, data, headers):
        try:
            raise RuntimeError(f"inner error holding {headers}")
        except RuntimeError:
            raise exc
    return send


QUOTING = {  # what http.client, codecs and urllib raise, quoting the header or the key
    "refused header": ValueError(f"Invalid header value b'Bearer {KEY}\\r\\n'"),
    "encoding": UnicodeEncodeError("latin-1", f"Bearer {KEY}\u2013", 30, 31, f"ordinal not in range: {KEY}"),
    "over lines": TypeError(f"bad header\nAuthorization: Bearer {KEY[:12]}\n{KEY[12:]}"),
}


@pytest.mark.parametrize("name", list(QUOTING))
def test_an_exception_of_the_send_quoting_the_key_is_one_redacted_line_its_chain_cut(failing, monkeypatch, name):
    monkeypatch.setattr(HostedDetector, "_send", _raising(QUOTING[name]))
    with pytest.raises(EndpointError) as err:
        HostedDetector(card(failing.url)).predict_proba([PICTURE], ["yes"])
    message = str(err.value)
    assert message.startswith(f"{failing.url}/chat/completions (model 'fake-vlm'): the request could not be sent "
                              f"({type(QUOTING[name]).__name__}: ") and "\n" not in message, message
    assert err.value.__cause__ is None and err.value.__suppress_context__
    printed = "".join(traceback.format_exception(err.value))
    assert _leaks(message) == [] and _leaks(printed) == [] and "inner error" not in printed, printed
    assert "Bearer ***" in message or name == "encoding", message


def test_a_network_error_quoting_the_key_is_retried_and_named_redacted(failing, monkeypatch):
    monkeypatch.setattr(HostedDetector, "_send", _raising(urllib.error.URLError(f"proxy said: Bearer {KEY}\nbye")))
    with pytest.raises(EndpointError) as err:
        HostedDetector(card(failing.url, retries=1)).predict_proba([PICTURE], ["yes"])
    assert str(err.value).endswith("did not answer after 2 tries (last: URLError: proxy said: Bearer *** bye)")
    assert _leaks("".join(traceback.format_exception(err.value))) == []


def test_a_run_whose_send_raises_with_the_key_shows_it_nowhere(pytester, failing, monkeypatch):
    """The terminal, the JSON report and the JUnit XML (long tracebacks, locals shown) of a run whose send raised an
    error quoting the Authorization header: its cases print one line; the prompt-invariance tests, plain test
    functions, print a traceback whose locals held the key and the headers."""
    monkeypatch.setattr(HostedDetector, "_send", _raising(ValueError(f"Invalid header value b'Bearer {KEY}\\r\\n'")))
    model = _card_file(pytester.path / "raising.toml", failing.url, requests_per_second=0)
    report, junit = pytester.path / "r.json", pytester.path / "junit.xml"
    result = pytester.runpytest(f"--memerobust-model={model}", "--memerobust-limit=4", "-p", "no:cacheprovider",
                                "--memerobust-bootstrap=20", f"--memerobust-report={report}", f"--junitxml={junit}",
                                "--tb=long", "-l", "-rA",
                                "-k", "(rainbow and typos-3 and not hotflip and not universal) or prompt_invariance")
    out = result.stdout.str() + result.stderr.str()
    said = "the request could not be sent (ValueError: Invalid header value b'Bearer ***\\r\\n')"
    assert said in out and said in junit.read_text(), (out, junit.read_text())
    for text in (out, report.read_text() if report.exists() else "", junit.read_text()):
        assert _leaks(text) == [] and "inner error" not in text, text
    assert "test_verdicts_do_not_depend_on_the_wording_of_the_prompt" in out and "headers    = " in out, out
    assert result.parseoutcomes().get("failed", 0) >= 4 and Failing.log == []
