"""A hosted model behind an OpenAI-compatible endpoint (detectors/hosted.py), against a fake server this test starts
on 127.0.0.1: logprobs read as probabilities, real refusal phrasings and malformed replies as abstentions, HTTP 429
and timeouts retried, a re-run answered from the response cache with no request, no socket to anywhere else, and the
key never sent elsewhere by a redirect nor shown in an error."""
from __future__ import annotations

import _socket
import json
import math
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from pytest_memerobust.detectors import ModelCard, Network, load_detector
from pytest_memerobust.detectors.hosted import EndpointError, HostedDetector
from pytest_memerobust.errors import ConfigError

# Refusals as models phrase them (OpenAI, Anthropic, Google and open models' moderation answers).
REFUSALS = [
    "I'm sorry, but I can't help with that.",
    "I can't assist with that request.",
    "I’m unable to provide an assessment of this image.",
    "Sorry, I cannot analyze content that may be hateful.",
    "As an AI developed by OpenAI, I cannot make judgments about this meme.",
    "I apologize, but I won't be able to help with classifying this content.",
    "I cannot determine that.",
    "This content may violate our usage policies.",
]


class FakeEndpoint(BaseHTTPRequestHandler):
    """Answers by the caption: "yes ..." -> Yes (0.8), "no ..." -> No (0.9), any other -> Yes and No summing to 0.95
    by a hash of the caption, "refuse k" -> REFUSALS[k] with no label
    word among the logprobs, "plain" -> "Yes" without logprobs, "broken" -> not JSON, "busy" -> HTTP 429 on the first
    try, "slow" -> an answer after the client's timeout on the first try, "badkey" -> HTTP 401, "echo" -> HTTP 401
    whose body repeats the Authorization header it got (from byte 286, where a body clipped to 300 bytes cut the key
    in half), and "redirect NNN" -> HTTP NNN to `elsewhere`, a second server."""

    requests: list[str] = []
    seen: set = set()
    elsewhere = ""

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"][1]["text"]
        caption = prompt.split('"')[1]
        assert body["messages"][-1]["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
        first_try = caption not in self.seen
        self.seen.add(caption)
        self.requests.append(caption)
        if caption == "busy" and first_try:
            return self._send(429, b'{"error": "rate limited"}')
        if caption == "slow" and first_try:
            import time

            time.sleep(1.5)
        if caption == "badkey":
            return self._send(401, b'{"error": {"message": "Incorrect API key provided"}}')
        if caption == "echo":
            said = self.headers.get("Authorization", "")
            echoed = f"Incorrect API key provided: {said.removeprefix('Bearer ')}; header was {said}"
            return self._send(401, json.dumps({
                "trace": "retry with Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.c2Vzc2lvbg.c2lnbmF0dXJl",
                "padding": "x" * 130, "error": {"message": echoed}}).encode())
        if caption.startswith("redirect"):
            self.send_response(int(caption.split()[1]))
            self.send_header("Location", f"{self.elsewhere}/v1/chat/completions")
            self.send_header("Content-Length", "0")
            return self.end_headers()
        if caption == "broken":
            return self._send(200, b"<html>502 Bad Gateway</html>")
        if caption.startswith("refuse"):
            text = REFUSALS[int(caption.split()[1])]
            top = [{"token": text.split()[0], "logprob": math.log(0.9)}, {"token": "Yes", "logprob": math.log(0.01)}]
            return self._send(200, json.dumps(_reply(text, top)).encode())
        if caption == "plain":
            return self._send(200, json.dumps(_reply("Yes.", None)).encode())
        share = int.from_bytes(caption.encode()[:4].ljust(4, b"x"), "big") % 97 / 97  # any other caption: mass 0.95
        yes = 0.8 if caption.startswith("yes") else 0.05 if caption.startswith("no") else 0.05 + 0.85 * share
        no = 0.9 if caption.startswith("no") else 0.1 if caption.startswith("yes") else 0.95 - yes
        top = [{"token": "Yes", "logprob": math.log(yes)}, {"token": "No", "logprob": math.log(no)},
               {"token": "Maybe", "logprob": math.log(0.01)}]
        return self._send(200, json.dumps(_reply("Yes" if yes > no else "No", top)).encode())

    def _send(self, status: int, payload: bytes):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _reply(text: str, top) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
    if top is not None:
        choice["logprobs"] = {"content": [{"token": text.split()[0], "logprob": top[0]["logprob"],
                                           "top_logprobs": top}]}
    return {"choices": [choice], "usage": {"prompt_tokens": 100, "completion_tokens": 1}}


class Elsewhere(BaseHTTPRequestHandler):
    """The server a redirect points at: records each request's method and Authorization header, answers 200."""

    received: list[tuple[str, str | None]] = []

    def log_message(self, *args):  # quiet
        pass

    def _record(self):
        self.received.append((self.command, self.headers.get("Authorization")))
        payload = json.dumps(_reply("Yes", None)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _record


def _serve(handler) -> ThreadingHTTPServer:
    """A server on 127.0.0.1 in a thread; it checks for shutdown every 50 ms, so stopping it takes no longer."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@pytest.fixture
def endpoint(monkeypatch):
    """The fake server's base URL (and a second server, where its redirects point); every other connection is
    refused."""
    FakeEndpoint.requests, FakeEndpoint.seen, Elsewhere.received = [], set(), []
    server, elsewhere = _serve(FakeEndpoint), _serve(Elsewhere)
    FakeEndpoint.elsewhere = f"http://127.0.0.1:{elsewhere.server_address[1]}"
    def local_only(self, address):  # (tests/conftest.py refuses every connection; this one lets 127.0.0.1 through)
        if not (isinstance(address, tuple) and address[0] == "127.0.0.1"):
            raise AssertionError(f"connection to {address!r} attempted")
        return _socket.socket.connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    for running in (server, elsewhere):
        running.shutdown()
        running.server_close()


def card(url: str, **params) -> ModelCard:
    return ModelCard(name="fake-hosted", architecture="hosted", classes=("non-hateful", "hateful"),
                     network=Network(params={"base_url": url, "model": "fake-vlm", "requests_per_second": 0,
                                             "timeout_s": 1.0, "retries": 2, "abstain_below": 0.5, **params}))


PICTURE = np.zeros((16, 16, 3), np.uint8)


def test_logprobs_become_class_probabilities(endpoint):
    detector = load_detector(card(endpoint))
    proba, abstained = detector.predict_with_abstentions([PICTURE] * 2, ["yes they are", "no way"])
    np.testing.assert_allclose(proba, [[0.1 / 0.9, 0.8 / 0.9], [0.9 / 0.95, 0.05 / 0.95]], atol=1e-9)
    assert not abstained.any() and detector.usage["input_tokens"] == 200


@pytest.mark.parametrize("k", range(len(REFUSALS)))
def test_each_refusal_phrasing_is_an_abstention(endpoint, k):
    detector = load_detector(card(endpoint))
    _, abstained = detector.predict_with_abstentions([PICTURE], [f"refuse {k}"])
    assert abstained.tolist() == [True]


def test_a_reply_that_cannot_be_parsed_is_an_abstention_and_one_without_logprobs_is_read_from_its_word(endpoint):
    detector = load_detector(card(endpoint))
    proba, abstained = detector.predict_with_abstentions([PICTURE] * 2, ["broken", "plain"])
    assert abstained.tolist() == [True, False] and proba[1].tolist() == [0.0, 1.0]
    assert "1 answers came without logprobs" in detector.run_note()


def test_rate_limits_and_timeouts_are_retried(endpoint):
    detector = load_detector(card(endpoint))
    proba, abstained = detector.predict_with_abstentions([PICTURE] * 2, ["busy", "slow"])
    assert not abstained.any() and detector.usage["retries"] == 2
    assert FakeEndpoint.requests.count("busy") == 2 and FakeEndpoint.requests.count("slow") >= 2


def test_a_refused_key_is_one_error_naming_the_endpoint(endpoint, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EndpointError, match=r"chat/completions \(model 'fake-vlm'\) refused the request: HTTP 401 .*"
                                            r"Incorrect API key.*no key in \$OPENAI_API_KEY"):
        load_detector(card(endpoint)).predict_proba([PICTURE], ["badkey"])


def test_an_endpoint_that_never_answers_is_one_error_after_the_retries(endpoint):
    detector = HostedDetector(card("http://127.0.0.1:9/v1", retries=1, timeout_s=0.5))  # the discard port
    with pytest.raises(EndpointError, match=r"did not answer after 2 tries \(last: URLError"):
        detector.predict_proba([PICTURE], ["yes"])


KEY = "sk-proj-" + "Zq9" * 12  # looks like an OpenAI project key


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_refused_and_the_key_never_reaches_the_other_server(endpoint, monkeypatch, status):
    """urllib followed 301/302/303 to any host as a GET carrying the Authorization header (and turned 307/308 into
    "refused the request")."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(EndpointError) as err:
        load_detector(card(endpoint)).predict_proba([PICTURE], [f"redirect {status}"])
    assert Elsewhere.received == [], "the request followed the redirect"
    assert f"HTTP {status} redirect to {FakeEndpoint.elsewhere} was not followed" in str(err.value), str(err.value)
    assert FakeEndpoint.requests == [f"redirect {status}"]  # not retried either


def test_an_error_body_echoing_the_key_or_a_bearer_token_is_redacted(endpoint, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(EndpointError) as err:
        load_detector(card(endpoint)).predict_proba([PICTURE], ["echo"])
    message = str(err.value)
    assert "refused the request: HTTP 401" in message and "Incorrect API key provided: ***" in message, message
    assert "Zq9Zq9" not in message and "eyJhbGci" not in message and "Bearer ***" in message, message


def test_credentials_in_the_base_url_are_refused_and_never_printed():
    """The key comes from $api_key_env, never from the card: a card is committed, printed and copied into reports."""
    with pytest.raises(ConfigError) as err:
        HostedDetector(card("http://alice:hunter22@127.0.0.1:1/v1"))
    message = str(err.value)
    assert "base_url http://***@127.0.0.1:1/v1 holds credentials" in message and "$OPENAI_API_KEY" in message
    assert "alice" not in message and "hunter22" not in message, message


@pytest.mark.parametrize("text, shown", [
    ("https://user:pw@host.example/v1 and ftp://u@h/x", "https://***@host.example/v1 and ftp://***@h/x"),
    ("http://u:p@ss@host/x?next=a@b", "http://***@host/x?next=a@b"),
    ('{"Authorization": "Bearer abc.DEF-123_456"}', '{"Authorization": "Bearer ***"}'),
    ("Basic dXNlcjpwYXNzd29yZA==", "Basic ***"),
    ("key sk-ant-api03-AAAAAAAAAAAAAAAAAAAA leaked", "key *** leaked"),
    ("https://h/v1?api-key=0123456789abcdef&x=1", "https://h/v1?api-key=***&x=1"),
    ('{"access_token": "ya29.A0ARrdaM-long", "max_tokens": 1}', '{"access_token": "***", "max_tokens": 1}'),
    ("my key is s3cr3t!", "my key is ***"),
])
def test_secrets_are_redacted_from_any_text(text, shown):
    from pytest_memerobust.detectors.hosted import redact

    assert redact(text, ["s3cr3t!"]) == shown


@pytest.mark.parametrize("params, culprit", [
    ({"base_url": ""}, "base_url must name"), ({"model": 3}, "model must name"),
    ({"requests_per_second": -1}, "requests_per_second must be a number >= 0"),
    ({"timeout_s": "soon"}, "timeout_s must be a number >= 0"),
    ({"temperature": 0.7}, "unknown key(s) ['temperature']"),
    ({"label_words": ["Yes"]}, "label_words must be 2 distinct words"),
])
def test_a_bad_endpoint_card_is_one_error_naming_the_key(params, culprit):
    with pytest.raises(ConfigError) as err:
        HostedDetector(card("http://127.0.0.1:1/v1", **params))
    assert culprit in str(err.value)


def test_the_suites_run_against_the_endpoint_and_a_second_run_sends_nothing(pytester, endpoint, tmp_path):
    path = tmp_path / "hosted.toml"
    path.write_text(f'name = "fake-hosted"\narchitecture = "hosted"\nclasses = ["non-hateful", "hateful"]\n'
                    f'[params]\nbase_url = "{endpoint}"\nmodel = "fake-vlm"\nrequests_per_second = 0\n'
                    f'price_per_million_input_tokens = 1.0\n')
    args = [f"--memerobust-model={path}", "--memerobust-limit=6", "--memerobust-bootstrap=20", "-p", "no:cacheprovider",
            f"--memerobust-cache-dir={tmp_path / 'cache'}",
            "-k", "rainbow and (typos-3 or imagenet_c-3) and not hotflip and not universal"]
    first = pytester.runpytest(*args, f"--memerobust-report={tmp_path / 'a.json'}")
    sent = len(FakeEndpoint.requests)
    outcomes = first.parseoutcomes()
    assert sent > 0 and "errors" not in outcomes and outcomes.get("passed", 0) + outcomes.get("failed", 0) >= 3
    assert f"fake-hosted: {sent} requests to {endpoint}" in first.stdout.str()
    second = pytester.runpytest(*args, f"--memerobust-report={tmp_path / 'b.json'}")
    assert len(FakeEndpoint.requests) == sent, "the second run asked the endpoint again"
    assert "fake-hosted: 0 requests" in second.stdout.str()
    reports = [json.loads((tmp_path / name).read_text())["groups"] for name in ("a.json", "b.json")]
    assert reports[0] == reports[1]


def test_the_image_attacks_reach_a_hosted_model_by_queries_alone_and_count_them(endpoint, monkeypatch):
    """A hosted model has no gradients: a white-box attack says so, Square and the joint attack's black-box fallback
    ask the server, within their budgets, and count what they asked (this fake server reads only the caption, so
    Square finds nothing to move and spends its whole budget)."""
    import torch

    from pytest_memerobust.perturb import get, image_attacks
    from pytest_memerobust.perturb.attacks import AttackContext, CleanInputs
    from pytest_memerobust.perturb.image_attacks import NoGradient

    monkeypatch.setattr(image_attacks, "SQUARE_QUERIES", 12)
    detector = load_detector(card(endpoint))
    pictures = [torch.full((3, 16, 16), 100, dtype=torch.uint8), torch.full((3, 16, 16), 30, dtype=torch.uint8)]
    captions, ids = ["yes they are", "yes those people"], ["a", "b"]

    def context():
        return AttackContext(detector, np.array([1, 1]), CleanInputs(None, pictures, captions), ids=ids)

    with pytest.raises(NoGradient, match="HostedDetector has no differentiable image path"):
        get("pgd_linf").apply(pictures, ids, 2, 0, context())
    FakeEndpoint.requests.clear()
    square = context()
    get("square").apply(pictures, ids, 2, 0, square)
    records = square.outcomes[("image", "square", 2)]
    assert [r["queries"] for r in records.values()] == [12, 12] and not any(r["success"] for r in records.values())
    assert len(FakeEndpoint.requests) == 2 * 12 + 2  # its queries, and judging each outcome once
    FakeEndpoint.requests.clear()
    joint = context()
    get("co_attack").apply(pictures, ids, 1, 0, joint)
    records = joint.outcomes[("image", "co_attack", 1)]
    assert all(0 < r["queries"] <= len(FakeEndpoint.requests) and not r["white_box"] for r in records.values())
