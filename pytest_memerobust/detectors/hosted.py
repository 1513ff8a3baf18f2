"""A hosted model as a detector: any OpenAI-compatible chat endpoint that takes pictures (OpenAI, or a user's own
vLLM or TGI server), asked the same prompt as a local vision-language model (detectors/vlm.py).

Each meme is one request (the picture as a PNG data URL, the prompt, one answer token, temperature 0, logprobs asked
for). Where the server returns logprobs, the class probabilities are the label words' probabilities among the answer
token's top candidates, renormalised, and AUROC works as for any detector. Where it returns none, the answer's first
word decides (a one-hot probability; the run notes say AUROC then means little). A reply that is neither a label
word nor has enough label-word mass (a refusal) is an abstention; so is one that cannot be read (`unreadable`: not
JSON, no choice, a NaN or infinite logprob), which is never cached and is counted in the run's note with its reason.

A card with `samples` or `temperature` (detectors/sampling.py) asks each meme k times at that temperature, each
request with a `seed` keyed by (run seed, meme id, condition, sample index); a sample's answer is the word the server
sampled, and each is cached under its temperature, seed and index.

Every request is bounded (endpoint_guard.py): `timeout_s` is its whole time, connect to last byte; a reply longer
than `max_reply_bytes` is an error, never cached; `requests_per_second` holds for the whole run, shared by its pool
and pytest-xdist workers; HTTP 429, 5xx and timeouts are retried with exponential backoff (or the server's
Retry-After); and after three failed tries in a row, or a Retry-After longer than RETRY_AFTER_MAX_S, the endpoint is
down for the rest of the run (EndpointDown, which stops it). Any other exception of the send is one redacted line,
its chain cut: http.client quotes a header it refuses, Authorization too. Before the first request the run says how
many its cases send at most (hosted_cost.py), and refuses a run beyond the card's `max_requests`. Every answer read
is kept in a response cache keyed by (endpoint, model, prompt, picture digest), so a re-run sends nothing already
answered. Tokens are counted, and their cost where the card gives prices; pool workers' requests are counted in the
run's note with the driver's.

The client is urllib, not httpx or the `openai` package: their timeouts are per operation too (httpx's read timeout
is the wait for each chunk), so a total deadline needs the guard this module has anyway, and the rest (Retry-After,
no redirects, a bounded read) is a few lines here; a dependency in every install would serve no user of a local run.

The key never leaves for another address and is never shown. A redirect is not followed: urllib would carry the
Authorization header to whatever host the endpoint names and turn the POST into a GET (301/302/303), so the
error names the status and the target's origin, and the user moves base_url there (as the OpenAI client, httpx, and
curl do by default). A base_url with credentials in it (https://user:pass@host, or ?api_key=... and other credential
query parameters) is refused: the key belongs in $api_key_env, not in a card that is committed, printed and copied
into reports. Every message this module produces, and every reply before it is parsed or cached, goes through
redaction.py, which finds the key however a server echoed it (JSON-escaped, URL-encoded, HTML entities, hex, base64,
wrapped over lines, cut short). The key is read stripped of surrounding whitespace, and one that cannot go in an HTTP
header is refused before anything is sent.

    name = "openai-compatible"
    architecture = "hosted"
    classes = ["non-hateful", "hateful"]
    [params]
    base_url = "https://api.openai.com/v1"   # or http://localhost:8000/v1 for vLLM
    model = "gpt-4o-mini"
    api_key_env = "OPENAI_API_KEY"          # the key is read from this variable, never from the card
    prompt = 'The caption of this meme reads: "{caption}". Is the meme hateful? Answer {options}.'
    label_words = ["No", "Yes"]
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import io
import json
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..atomic import atomic_path
from ..errors import ConfigError, EndpointDown, EndpointError
from .redaction import HIDDEN, redact, redact_json_text, secret_query_parameters  # noqa: F401  (redact: cli/listing.py)
from .cards import ModelCard
from .endpoint_guard import (BREAKER_FAILURES, BREAKER_MIN_S, RETRY_AFTER_MAX_S, Breaker, Deadline, Pacer,
                             retry_after, utc)
from .registry import register_architecture
from .sampling import misplaced
from .vlm import PARAMS as PROMPT_PARAMS, card_prompt

__all__ = ["EndpointDown", "EndpointError", "HostedDetector", "redact"]

ENDPOINT_PARAMS = ("base_url", "model", "api_key_env", "requests_per_second", "timeout_s", "retries",
                   "top_logprobs", "price_per_million_input_tokens", "price_per_million_output_tokens",
                   "max_reply_bytes", "max_requests")
RETRY_STATUSES = (429, 500, 502, 503, 504)
ERROR_BODY_CHARS = 300  # of an error reply's body quoted in the message, after redaction
ERROR_BODY_BYTES = 64 * 1024  # of an error reply's body read at most
MAX_REPLY_BYTES = 4 * 2**20  # a reply longer than this is an error, never read further nor cached (max_reply_bytes)
_NOT_IN_A_HEADER = re.compile(r"[^\t\x20-\x7e\xa0-\xff]")  # control characters, and beyond Latin-1
USAGE_KEYS = ("requests", "cached", "retries", "input_tokens", "output_tokens", "without_logprobs", "unreadable")


def api_key(env: str) -> str:
    """The key in $`env` ("" where unset), stripped: a secret pasted with its newline, a Windows .env's "\\r". One
    that cannot go in an HTTP header is a ConfigError naming the variable, never the key (http.client would quote it
    in its own error, or send a header cut at its line break)."""
    key = os.environ.get(env, "").strip()
    bad = _NOT_IN_A_HEADER.search(key)
    if bad:
        raise ConfigError(f"${env} holds a key that cannot be sent in an HTTP header (its character {bad.start() + 1} "
                          f"is a control character or outside Latin-1); set ${env} to the key alone")
    return key


def _shown(text: str, limit: int) -> str:
    """Text from the endpoint for a message: control characters escaped (no terminal codes), clipped."""
    text = text if text.isprintable() else repr(text)[1:-1]
    return text if len(text) <= limit else text[:limit] + "..."


class _Secret(str):
    """The key, or a header value holding it: a str to urllib and http.client, *** where a traceback shows the locals
    of the frame that holds it (pytest -l, --showlocals: a hosted detector asked by a plain test function)."""

    def __repr__(self) -> str:
        return repr(HIDDEN)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Answer a redirect as the error it is here (see the module's docstring): urllib then raises HTTPError 3xx."""

    def redirect_request(self, *args, **kwargs):
        return None


class HostedDetector:
    """An OpenAI-compatible chat endpoint as a black-box detector of the card's classes."""

    modalities = ("image", "text")

    def __init__(self, card: ModelCard, device: str = "cpu"):
        where = f"model card {card.path or card.name!r}: [params]"
        endpoint = {k: v for k, v in card.network.params.items() if k in ENDPOINT_PARAMS}
        prompt_params = {k: v for k, v in card.network.params.items() if k not in ENDPOINT_PARAMS}
        unknown = set(prompt_params) - set(PROMPT_PARAMS)
        if unknown:
            raise ConfigError(f"{where} unknown key(s) {sorted(unknown)}{misplaced(unknown)}; a hosted card takes "
                              f"{', '.join(ENDPOINT_PARAMS + PROMPT_PARAMS)}")
        self.prompt, params = card_prompt(replace(card, network=replace(card.network, params=prompt_params)))
        self.abstain_below = float(params["abstain_below"])
        for key in ("base_url", "model"):
            if not isinstance(endpoint.get(key), str) or not endpoint[key].strip():
                raise ConfigError(f"{where} {key} must name the endpoint's {key.replace('_', ' ')}, got "
                                  f"{endpoint.get(key)!r}")
        key_env = endpoint.get("api_key_env", "OPENAI_API_KEY")
        if urllib.parse.urlsplit(endpoint["base_url"].strip()).username is not None:
            raise ConfigError(f"{where} base_url {redact(endpoint['base_url'])} holds credentials: they would be "
                              f"printed and saved with the card; put the key in ${key_env} (api_key_env) instead")
        in_query = secret_query_parameters(endpoint["base_url"].strip())
        if in_query:  # refused before anything is written: reports, notes and trackers copy base_url
            raise ConfigError(f"{where} base_url holds a credential in its query string ({', '.join(in_query)}=...): "
                              f"it would be printed and saved with the card and the run's reports; put the key in "
                              f"${key_env} (api_key_env) instead")
        self.card, self.classes, self.device = card, tuple(card.classes), "cpu"
        self.base_url, self.model = endpoint["base_url"].rstrip("/"), endpoint["model"]
        self.key_env = str(key_env)
        api_key(self.key_env)  # a key that cannot be sent is refused before the run starts
        numbers = {"requests_per_second": 2.0, "timeout_s": 15.0, "retries": 5, "top_logprobs": 20,
                   "price_per_million_input_tokens": 0.0, "price_per_million_output_tokens": 0.0,
                   "max_reply_bytes": MAX_REPLY_BYTES, "max_requests": None}
        for key, default in numbers.items():
            value = endpoint.get(key, default)
            if value is None and default is None:
                setattr(self, key, None)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or math.isinf(value):
                raise ConfigError(f"{where} {key} must be a number >= 0, got {value!r}")
            setattr(self, key, value)
        for key in ("retries", "max_reply_bytes", "max_requests"):
            value = getattr(self, key)
            if value is not None and (value != int(value) or (key != "retries" and value < 1)):
                raise ConfigError(f"{where} {key} must be a whole number{' >= 1' if key != 'retries' else ''}, got "
                                  f"{value!r}")
        if not self.timeout_s > 0:
            raise ConfigError(f"{where} timeout_s must be a number > 0 (the whole request's seconds), got "
                              f"{self.timeout_s!r}")
        self.cache_dir: Path | None = None
        self.usage = dict.fromkeys(USAGE_KEYS, 0)
        self.unreadable_reason = ""  # why the first unreadable reply of the run could not be read, for its note
        self.fingerprint_text = f"hosted:{self.base_url}:{self.model}"
        self.use_run_folder(None)

    def with_prompt(self, prompt) -> "HostedDetector":
        """This endpoint asked with another prompt (the prompt-invariance view); answers are cached per prompt."""
        import copy

        view = copy.copy(self)
        view.prompt = prompt
        return view

    def use_cache(self, directory: Path | None) -> None:
        """Keep answers under `directory`/hosted (None: in this run only)."""
        self.cache_dir = None if directory is None else Path(directory) / "hosted"

    def use_run_folder(self, folder: Path | None) -> None:
        """Share the rate limit and the breaker with every process of the run through files in `folder` (the run's
        shared folder; None: this process alone)."""
        name = hashlib.sha256(f"{self.base_url}\0{self.model}".encode()).hexdigest()[:16]
        where = redact(f"{self.base_url}/chat/completions (model {self.model!r})")
        self.pacer = Pacer(self.requests_per_second, None if folder is None else Path(folder) / f"{name}.slot")
        self.breaker = Breaker(where, min(BREAKER_MIN_S, BREAKER_FAILURES * self.timeout_s),
                               None if folder is None else Path(folder) / f"{name}.down")

    # --- one meme -------------------------------------------------------------------------------------------------

    def _messages(self, picture: np.ndarray, caption: str) -> list[dict]:
        from PIL import Image

        buffer = io.BytesIO()
        Image.fromarray(_array(picture)).save(buffer, format="PNG")  # the picture leaves as a PNG: an edge
        url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
        messages = []
        if self.prompt.system:
            messages.append({"role": "system", "content": self.prompt.system})
        messages.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                     {"type": "text", "text": self.prompt.text(caption)}]})
        return messages

    def _cache_path(self, picture: np.ndarray, caption: str, sample: tuple = ()) -> Path | None:
        if self.cache_dir is None:
            return None
        from ..data.digests import input_digest

        key = json.dumps([self.base_url, self.model, self.prompt.system, self.prompt.text(caption),
                          input_digest(_array(picture)), *sample], ensure_ascii=False)
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return self.cache_dir / digest[:2] / f"{digest}.json"

    def answer(self, picture: np.ndarray, caption: str, temperature: float = 0, seed: int | None = None,
               index: int | None = None) -> dict:
        """The endpoint's reply to one meme (from the response cache when it was answered before); with a `seed`,
        sample `index` of a repeat-sampled meme at `temperature`, cached apart under all three."""
        sample = () if seed is None else ({"temperature": temperature, "seed": seed, "sample": index},)
        path = self._cache_path(picture, caption, sample)
        if path is not None and path.is_file():
            try:  # redacted again on the way in: an entry an older version wrote may hold the key
                reply = json.loads(redact_json_text(path.read_text(encoding="utf-8"), self._secrets()))
            except (OSError, ValueError):  # a damaged entry is asked again
                reply = None
            if isinstance(reply, dict) and unreadable(reply) is None:  # (an older version cached unreadable ones)
                self.usage["cached"] += 1
                return reply
        body = {"model": self.model, "messages": self._messages(picture, caption), "max_tokens": 1,
                "temperature": temperature, "logprobs": True, "top_logprobs": int(self.top_logprobs)}
        if seed is not None:
            body["seed"] = seed
        reply = self._post(body)
        why = unreadable(reply)
        if why is not None:  # an abstention this once, never cached: a proxy's error page, a server's bad minute
            self.usage["unreadable"] += 1
            self.unreadable_reason = self.unreadable_reason or redact(why, self._secrets())
        elif path is not None:
            try:
                with atomic_path(path) as tmp:
                    tmp.write_text(json.dumps(reply), encoding="utf-8")
            except OSError:  # a read-only cache costs requests, never the run
                pass
        return reply

    def _secrets(self) -> tuple[str, ...]:
        return (api_key(self.key_env),)

    def _send(self, url: str, data: bytes, headers: dict) -> tuple[int, object, bytes]:
        """(status, headers, body) of one try, connect to last byte within timeout_s (endpoint_guard.Deadline); an
        error reply's body cut at ERROR_BODY_BYTES, a reply longer than max_reply_bytes an EndpointError."""
        deadline = Deadline(float(self.timeout_s), self.breaker.found_down)
        with deadline, self.breaker.watching(deadline):
            try:
                try:
                    response = deadline.opener(_NoRedirects).open(urllib.request.Request(url, data, headers),
                                                                  timeout=self.timeout_s)
                except urllib.error.HTTPError as exc:  # a reply too, whose body is read the same way
                    response = exc
                status = int(getattr(response, "status", None) or response.code)
                limit = int(self.max_reply_bytes) if status < 300 else ERROR_BODY_BYTES
                try:
                    body, cut = (b"", False) if getattr(response, "fp", None) is None else deadline.read(response, limit)
                finally:
                    _close(response)
            except (OSError, http.client.HTTPException, urllib.error.URLError) as exc:
                # the socket's own timeout is timeout_s of silence: the request's time is up even where the
                # deadline's timer thread (late under load) has not marked it yet
                if deadline.expired or isinstance(getattr(exc, "reason", exc), TimeoutError):
                    raise deadline.timeout() from None
                raise
        if cut and status < 300:
            raise EndpointError(f"{self._where()} sent a reply longer than {int(self.max_reply_bytes)} bytes "
                                f"(max_reply_bytes): it was neither read further nor cached")
        return status, response.headers, body

    def _where(self) -> str:
        return redact(f"{self.base_url}/chat/completions (model {self.model!r})", self._secrets())

    def _post(self, body: dict) -> dict:
        url = f"{self.base_url}/chat/completions"
        key = _Secret(api_key(self.key_env))
        headers = {"Content-Type": "application/json", **({"Authorization": _Secret(f"Bearer {key}")} if key else {})}
        data = json.dumps(body).encode()
        hidden = (key,)
        where = self._where()
        last, wait = "", 0.0
        for attempt in range(int(self.retries) + 1):
            self.breaker.check()
            if attempt:
                self.usage["retries"] += 1
                time.sleep(wait)
            self.pacer.wait()
            self.usage["requests"] += 1
            wait = min(30.0, 0.5 * 2 ** attempt)  # before the next try, unless the server says (Retry-After)
            try:
                status, reply_headers, raw = self._send(url, data, headers)
            except EndpointError:
                raise
            except (TimeoutError, OSError, http.client.HTTPException, urllib.error.URLError) as exc:
                last = _error_text(exc, hidden)
                self.breaker.failed(last)
                continue
            except Exception as exc:  # a header value http.client refuses, an encoding error...: not the network, so
                # not retried; their text and args may quote the headers, so one redacted line, the original cut off
                raise EndpointError(f"{where}: the request could not be sent ({_error_text(exc, hidden)})") from None
            if status in RETRY_STATUSES:
                asked = retry_after(reply_headers) if status in (429, 503) else None
                if asked is not None and asked > RETRY_AFTER_MAX_S:  # before any wait: the run would never end
                    self.breaker.stop(f"{where} asked (HTTP {status}, Retry-After) to be called again in "
                                      f"{asked:,.0f} s, at {utc(time.time() + asked)}: longer than the "
                                      f"{RETRY_AFTER_MAX_S:g} s a run waits; no more requests are sent to it and "
                                      f"the run stops here")
                last = f"HTTP {status}" + ("" if asked is None else f", Retry-After {asked:g} s")
                wait = wait if asked is None else asked
                if status != 429:  # 429 is the endpoint pacing us, not failing
                    self.breaker.failed(last)
                continue
            if 300 <= status < 400:
                target = urllib.parse.urlsplit(urllib.parse.urljoin(url, reply_headers.get("Location") or ""))
                origin = _shown(f"{target.scheme}://{target.netloc.rpartition('@')[2]}", 100)
                as_get = " and resend the request as a GET" if status in (301, 302, 303) else ""
                message = (f"{where}: its HTTP {status} redirect to {origin} was not followed (following it "
                           f"would send the key there{as_get}); set base_url to the address the endpoint "
                           f"answers at")
                raise EndpointError(redact(message, hidden))
            if status >= 400:
                detail = redact(raw.decode("utf-8", "replace").replace("\n", " "), hidden)
                raise EndpointError(f"{where} refused the request: HTTP {status} {_shown(detail, ERROR_BODY_CHARS)}"
                                    f"{'' if key else f'; no key in ${self.key_env}'}")
            self.breaker.succeeded()
            text = redact_json_text(raw.decode("utf-8", "replace"), hidden)  # before it is parsed, kept or cached
            try:
                reply = json.loads(text)
            except ValueError:  # never cached (`unreadable`), only quoted: redacted before it is cut, no half key
                return {"malformed": redact(text[:64 * 1024], hidden)[:200]}
            usage = reply.get("usage") if isinstance(reply, dict) else None
            if isinstance(usage, dict):
                self.usage["input_tokens"] += _count(usage.get("prompt_tokens"))
                self.usage["output_tokens"] += _count(usage.get("completion_tokens"))
            if not isinstance(reply, dict):
                return {"malformed": redact(str(reply)[:64 * 1024], hidden)[:200]}
            return reply
        raise EndpointError(f"{where} did not answer after {int(self.retries) + 1} tries (last: {last})")

    def read_reply(self, reply: dict) -> tuple[np.ndarray | None, bool]:
        """(class probabilities or None, whether logprobs gave them) of one reply; None is an abstention (a refusal,
        too little label-word mass, or a reply `unreadable` says cannot be read)."""
        if unreadable(reply) is not None:
            return None, False
        choice = reply["choices"][0]
        content = (choice.get("message") or {}).get("content") or ""
        words = [w.lower() for w in self.prompt.label_words]
        candidates = _candidates(choice)
        if candidates:
            per_class = np.zeros(len(words))
            for candidate in candidates:
                token, logprob = _token_logprob(candidate)
                if token is None:
                    continue
                token = token.lower()
                for k, word in enumerate(words):
                    if token and word.startswith(token) and (len(token) >= 2 or token == word):
                        per_class[k] += math.exp(logprob)
                        break
            mass = per_class.sum()
            if mass <= 0 or mass < self.abstain_below:
                return None, True
            return per_class / mass, True
        label = self._label_of(content)
        return (None, False) if label is None else (np.eye(len(words))[label], False)

    def _label_of(self, content: str) -> int | None:
        """The class whose label word a reply's text starts with (None: no label word, a refusal or other text)."""
        words = [w.lower() for w in self.prompt.label_words]
        first = content.strip().split()[0].strip(".,:;!\"'").lower() if content.strip() else ""
        return words.index(first) if first in words else None

    def sampled_answer(self, reply: dict) -> int:
        """The class a sampled reply names: the word the server sampled (its logprobs say what it might have said,
        not what it said); DECLINED where that is no label word."""
        from ..data.meme import DECLINED

        try:
            content = (reply["choices"][0].get("message") or {}).get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            return DECLINED
        label = self._label_of(str(content))
        return DECLINED if label is None else label

    def sample_answers(self, images, texts, keys, sampling) -> np.ndarray:
        """[memes, k] answers of a repeat-sampled run (detectors/sampling.py): per meme, k requests at the card's
        temperature, sample j with the seed keyed by (`keys[i]`, j), each answer cached under its seed."""
        from .sampling import request_seed

        answers = np.empty((len(texts), sampling.k), dtype=np.int8)
        for i, (picture, caption, key) in enumerate(zip(images, texts, keys)):
            for j in range(sampling.k):
                reply = self.answer(picture, caption, sampling.temperature, request_seed(key, j), j)
                answers[i, j] = self.sampled_answer(reply)
        return answers

    # --- the detector -------------------------------------------------------------------------------------------

    def predict_with_abstentions(self, images, texts) -> tuple[np.ndarray, np.ndarray]:
        proba = np.full((len(texts), len(self.classes)), 1.0 / len(self.classes))
        abstained = np.zeros(len(texts), bool)
        for i, (picture, caption) in enumerate(zip(images, texts)):
            p, from_logprobs = self.read_reply(self.answer(picture, caption))
            if p is None:
                abstained[i] = True
            else:
                proba[i] = p
                self.usage["without_logprobs"] += not from_logprobs
        return proba, abstained

    def predict_proba(self, images, texts) -> np.ndarray:
        return self.predict_with_abstentions(images, texts)[0]

    def usage_record(self) -> dict:
        """What this detector sent and what it cost, as plain data: a pytest-xdist worker hands it to the controller,
        which sums the workers' records into one note (`usage_note`)."""
        return {"card": self.card.name, "endpoint": redact(self.base_url, self._secrets()),
                "prices": [self.price_per_million_input_tokens, self.price_per_million_output_tokens],
                "usage": dict(self.usage), "unreadable_reason": self.unreadable_reason}

    def add_usage(self, usage: dict) -> None:
        """Count what another process sent for this detector (a pool worker's shard:
        ShardResult.accounting.hosted_usage)."""
        for key in USAGE_KEYS:
            self.usage[key] += int(usage.get(key, 0))

    def run_note(self) -> str:
        """Requests, answers from the cache, retries, tokens and cost of this run, for the run's notes."""
        return usage_note(self.usage_record())


def unreadable(reply: dict) -> str | None:
    """Why `reply` cannot be read, None where it can: not JSON (a proxy's HTML page, a reply cut short), no
    choices[0] with a message, or a logprob that is NaN or +Infinity (Python's json reads both). Such a reply is an
    abstention and is never cached, so a re-run asks again. A logprob of -Infinity is a probability of 0."""
    if "malformed" in reply:
        return f"not JSON: {_shown(str(reply['malformed']), 60)}"
    try:
        choice = reply["choices"][0]
        (choice.get("message") or {}).get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return f"no choices[0] with a message (keys: {_shown(', '.join(map(str, reply)), 60)})"
    for candidate in _candidates(choice):
        token, logprob = _token_logprob(candidate)
        if token is not None and (logprob != logprob or logprob == math.inf):
            return f"the logprob of the candidate token {_shown(repr(token), 40)} is {logprob}, not a finite number"
    return None


def _candidates(choice: dict) -> list:
    """A choice's top_logprobs (OpenAI's layout: logprobs.content[0].top_logprobs), [] without them."""
    try:
        candidates = (((choice.get("logprobs") or {}).get("content") or [{}])[0] or {}).get("top_logprobs")
    except (AttributeError, IndexError, KeyError, TypeError):
        return []
    return candidates if isinstance(candidates, list) else []


def _token_logprob(candidate) -> tuple[str | None, float]:
    """(token, logprob) of one top_logprobs candidate, the token stripped; (None, nan) where either cannot be read."""
    try:
        return str(candidate["token"]).strip(), float(candidate["logprob"])
    except (KeyError, TypeError, ValueError):
        return None, math.nan


def usage_note(record: dict) -> str:
    """The run's note of a `HostedDetector.usage_record` (or of several summed by `sum_usage`)."""
    u = record["usage"]
    cost = (u["input_tokens"] * record["prices"][0] + u["output_tokens"] * record["prices"][1]) / 1e6
    note = (f"{record['card']}: {u['requests']} requests to {record['endpoint']} ({u['retries']} retried), "
            f"{u['cached']} answers from the response cache; {u['input_tokens']} input and {u['output_tokens']} "
            f"output tokens" + (f", about ${cost:.4f}" if cost else ""))
    if u["without_logprobs"]:
        note += (f"; {u['without_logprobs']} answers came without logprobs (probabilities from the answer "
                 f"word alone: AUROC means little)")
    if u.get("unreadable"):
        why = record.get("unreadable_reason")
        note += (f"; {u['unreadable']} replies could not be read{f' (the first: {why})' if why else ''}: abstentions, "
                 f"not cached, so a re-run asks again")
    return note


def sum_usage(records) -> list[dict]:
    """Usage records summed per (card, endpoint), in the order first seen."""
    summed: dict[tuple, dict] = {}
    for record in records:
        key = (record["card"], record["endpoint"])
        if key not in summed:
            summed[key] = {**record, "usage": dict.fromkeys(USAGE_KEYS, 0)}
        summed[key]["unreadable_reason"] = summed[key].get("unreadable_reason") or record.get("unreadable_reason")
        for name in USAGE_KEYS:
            summed[key]["usage"][name] += int(record["usage"].get(name, 0))
    return list(summed.values())


def usage_delta(detector, before: dict | None) -> dict:
    """What `detector` (a hosted one; else nothing) sent since its usage was `before` (a copy of it)."""
    usage = getattr(detector, "usage", None)
    if not isinstance(usage, dict) or before is None:
        return {}
    delta = {key: usage.get(key, 0) - before.get(key, 0) for key in USAGE_KEYS}
    return delta if any(delta.values()) else {}


def _error_text(exc: BaseException, hidden) -> str:
    """An exception of the send as one line of a message: its type and text (a urllib error's reason), the key and
    any credential redacted (http.client quotes a header value it refuses, Authorization too), then clipped."""
    text = f"{type(exc).__name__}: {exc.reason if isinstance(exc, urllib.error.URLError) else exc}"
    return _shown(" ".join(redact(text, hidden).split()), ERROR_BODY_CHARS)


def _close(response) -> None:
    """Close a reply (an HTTPError without a body has nothing to close)."""
    try:
        response.close()
    except (AttributeError, OSError):
        pass


def _count(value) -> int:
    """A token count from a reply's usage (a server may send null, a string, or nonsense: 0 then)."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _array(picture) -> np.ndarray:
    """An H x W x 3 uint8 array of a picture given as a tensor (3 x H x W, on any device) or an array."""
    if hasattr(picture, "detach"):
        from ..data.pictures import to_array

        return to_array(picture)
    return np.asarray(picture, dtype=np.uint8)


@register_architecture("hosted")
def build_hosted(card: ModelCard, checkpoint, device: str) -> HostedDetector:
    if checkpoint is not None:
        raise ConfigError(f"model card {card.name!r}: a hosted model has no checkpoint file ({checkpoint})")
    return HostedDetector(card, device)
