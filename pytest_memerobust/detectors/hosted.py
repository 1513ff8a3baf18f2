"""A hosted model as a detector: any OpenAI-compatible chat endpoint that takes pictures (OpenAI, or a user's own
vLLM or TGI server), asked the same prompt as a local vision-language model (detectors/vlm.py).

Each meme is one request (the picture as a PNG data URL, the prompt, one answer token, temperature 0, logprobs asked
for). Where the server returns logprobs, the class probabilities are the label words' probabilities among the answer
token's top candidates, renormalised, and AUROC works as for any detector. Where it returns none, the answer's first
word decides (a one-hot probability; the run notes say AUROC then means little). A reply that is neither a label
word nor has enough label-word mass (a refusal, or text that cannot be parsed) is an abstention.

A card with `samples` or `temperature` (detectors/sampling.py) asks each meme k times at that temperature, each
request with a `seed` keyed by (run seed, meme id, condition, sample index); a sample's answer is the word the server
sampled, and each is cached under its temperature, seed and index.

Requests keep to `requests_per_second`, are retried with exponential backoff on HTTP 429, 5xx and timeouts, and every
answer is kept in a response cache keyed by (endpoint, model, prompt, picture digest), so a re-run sends nothing
already answered. Tokens are counted, and their cost where the card gives prices.

The key never leaves for another address and is never shown. A redirect is not followed: urllib would carry the
Authorization header to whatever host the endpoint names and turn the POST into a GET (301/302/303), so the
error names the status and the target's origin, and the user moves base_url there (as the OpenAI client, httpx, and
curl do by default). A base_url with credentials in it (https://user:pass@host) is refused: the key belongs in
$api_key_env, not in a card that is committed, printed and copied into reports. Every message this module produces
goes through `redact`.

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
from ..errors import ConfigError, MemeRobustError
from .cards import ModelCard
from .registry import register_architecture
from .sampling import misplaced
from .vlm import PARAMS as PROMPT_PARAMS, card_prompt

ENDPOINT_PARAMS = ("base_url", "model", "api_key_env", "requests_per_second", "timeout_s", "retries",
                   "top_logprobs", "price_per_million_input_tokens", "price_per_million_output_tokens")
RETRY_STATUSES = (429, 500, 502, 503, 504)
ERROR_BODY_CHARS = 300  # of an error reply's body quoted in the message, after redaction
HIDDEN = "***"
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]+@")  # up to the authority's last @ (p@ss too)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[a-z0-9._~+/=-]+")
_BASIC = re.compile(r"(?i)\b(basic\s+)(?=[a-z]*[0-9+/=])[a-z0-9+/]{8,}=*")  # base64, not "Basic authentication"
_KEY_LIKE = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}")  # OpenAI, Anthropic and look-alike API keys
_SECRET_FIELDS = re.compile(r"(?i)\b([\w-]*(?:api[_-]?key|token|secret|password|passwd)[\w-]*[\"']?\s*[:=]\s*[\"']?)"
                            r"([a-z0-9._~+/=-]{8,})")


def redact(text: str, secrets=()) -> str:
    """`text` with secrets replaced by ***: each of `secrets` (the API key), the user:password of any URL, Bearer and
    Basic credentials, sk-... style keys and the value of a key/token/secret/password field of 8+ characters."""
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    text = _USERINFO.sub(rf"\1{HIDDEN}@", text)
    text = _BASIC.sub(rf"\1{HIDDEN}", _BEARER.sub(rf"\1{HIDDEN}", text))
    text = _KEY_LIKE.sub(HIDDEN, text)
    return _SECRET_FIELDS.sub(rf"\1{HIDDEN}", text)


def _shown(text: str, limit: int) -> str:
    """Text from the endpoint for a message: control characters escaped (no terminal codes), clipped."""
    text = text if text.isprintable() else repr(text)[1:-1]
    return text if len(text) <= limit else text[:limit] + "..."


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Answer a redirect as the error it is here (see the module's docstring): urllib then raises HTTPError 3xx."""

    def redirect_request(self, *args, **kwargs):
        return None


class EndpointError(MemeRobustError):
    """The endpoint kept failing (after the retries), or refused the request outright (a bad key, an unknown model)."""


class HostedDetector:
    """An OpenAI-compatible chat endpoint as a black-box detector of the card's classes."""

    modalities = ("image", "text")

    def __init__(self, card: ModelCard, device: str = "cpu"):
        where = f"model card {card.path or card.name!r}: [params]"
        endpoint = {k: v for k, v in card.params.items() if k in ENDPOINT_PARAMS}
        prompt_params = {k: v for k, v in card.params.items() if k not in ENDPOINT_PARAMS}
        unknown = set(prompt_params) - set(PROMPT_PARAMS)
        if unknown:
            raise ConfigError(f"{where} unknown key(s) {sorted(unknown)}{misplaced(unknown)}; a hosted card takes "
                              f"{', '.join(ENDPOINT_PARAMS + PROMPT_PARAMS)}")
        self.prompt, params = card_prompt(replace(card, params=prompt_params))
        self.abstain_below = float(params["abstain_below"])
        for key in ("base_url", "model"):
            if not isinstance(endpoint.get(key), str) or not endpoint[key].strip():
                raise ConfigError(f"{where} {key} must name the endpoint's {key.replace('_', ' ')}, got "
                                  f"{endpoint.get(key)!r}")
        if urllib.parse.urlsplit(endpoint["base_url"].strip()).username is not None:
            raise ConfigError(f"{where} base_url {redact(endpoint['base_url'])} holds credentials: they would be "
                              f"printed and saved with the card; put the key in "
                              f"${endpoint.get('api_key_env', 'OPENAI_API_KEY')} (api_key_env) instead")
        self.card, self.classes, self.device = card, tuple(card.classes), "cpu"
        self.base_url, self.model = endpoint["base_url"].rstrip("/"), endpoint["model"]
        self.key_env = str(endpoint.get("api_key_env", "OPENAI_API_KEY"))
        numbers = {"requests_per_second": 2.0, "timeout_s": 60.0, "retries": 5, "top_logprobs": 20,
                   "price_per_million_input_tokens": 0.0, "price_per_million_output_tokens": 0.0}
        for key, default in numbers.items():
            value = endpoint.get(key, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or math.isinf(value):
                raise ConfigError(f"{where} {key} must be a number >= 0, got {value!r}")
            setattr(self, key, value)
        self.cache_dir: Path | None = None
        self.usage = {"requests": 0, "cached": 0, "retries": 0, "input_tokens": 0, "output_tokens": 0,
                      "without_logprobs": 0}
        self._last_request = 0.0
        self.fingerprint_text = f"hosted:{self.base_url}:{self.model}"

    def with_prompt(self, prompt) -> "HostedDetector":
        """This endpoint asked with another prompt (the prompt-invariance view); answers are cached per prompt."""
        import copy

        view = copy.copy(self)
        view.prompt = prompt
        return view

    def use_cache(self, directory: Path | None) -> None:
        """Keep answers under `directory`/hosted (None: in this run only)."""
        self.cache_dir = None if directory is None else Path(directory) / "hosted"

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
            try:
                reply = json.loads(path.read_text(encoding="utf-8"))
                self.usage["cached"] += 1
                return reply
            except (OSError, ValueError):  # a damaged entry is asked again
                pass
        body = {"model": self.model, "messages": self._messages(picture, caption), "max_tokens": 1,
                "temperature": temperature, "logprobs": True, "top_logprobs": int(self.top_logprobs)}
        if seed is not None:
            body["seed"] = seed
        reply = self._post(body)
        if path is not None:
            try:
                with atomic_path(path) as tmp:
                    tmp.write_text(json.dumps(reply), encoding="utf-8")
            except OSError:  # a read-only cache costs requests, never the run
                pass
        return reply

    def _post(self, body: dict) -> dict:
        url = f"{self.base_url}/chat/completions"
        key = os.environ.get(self.key_env, "")
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        data = json.dumps(body).encode()
        opener = urllib.request.build_opener(_NoRedirects)
        hidden = (key,)
        where = redact(f"{url} (model {self.model!r})", hidden)
        last = ""
        for attempt in range(int(self.retries) + 1):
            if attempt:
                self.usage["retries"] += 1
                time.sleep(min(30.0, 0.5 * 2 ** (attempt - 1)))
            if self.requests_per_second:
                wait = self._last_request + 1.0 / self.requests_per_second - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            self._last_request = time.monotonic()
            self.usage["requests"] += 1
            try:
                with opener.open(urllib.request.Request(url, data, headers), timeout=self.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if exc.code in RETRY_STATUSES:
                    continue
                if 300 <= exc.code < 400:
                    target = urllib.parse.urlsplit(urllib.parse.urljoin(url, exc.headers.get("Location") or ""))
                    origin = _shown(f"{target.scheme}://{target.netloc.rpartition('@')[2]}", 100)
                    as_get = " and resend the request as a GET" if exc.code in (301, 302, 303) else ""
                    message = (f"{where}: its HTTP {exc.code} redirect to {origin} was not followed (following it "
                               f"would send the key there{as_get}); set base_url to the address the endpoint "
                               f"answers at")
                    raise EndpointError(redact(message, hidden)) from None
                detail = redact(exc.read(64 * 1024).decode("utf-8", "replace").replace("\n", " "), hidden)
                raise EndpointError(f"{where} refused the request: HTTP {exc.code} {_shown(detail, ERROR_BODY_CHARS)}"
                                    f"{'' if key else f'; no key in ${self.key_env}'}") from None
            except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
                last = redact(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}", hidden)
                continue
            try:
                reply = json.loads(raw)
            except ValueError:  # kept in the response cache: redacted before it is cut, so no half key survives
                return {"malformed": redact(raw[:64 * 1024].decode("utf-8", "replace"), hidden)[:200]}
            usage = reply.get("usage") if isinstance(reply, dict) else None
            if isinstance(usage, dict):
                self.usage["input_tokens"] += int(usage.get("prompt_tokens") or 0)
                self.usage["output_tokens"] += int(usage.get("completion_tokens") or 0)
            return reply if isinstance(reply, dict) else {"malformed": redact(str(reply)[:64 * 1024], hidden)[:200]}
        raise EndpointError(f"{where} did not answer after {int(self.retries) + 1} tries (last: {last})")

    def read_reply(self, reply: dict) -> tuple[np.ndarray | None, bool]:
        """(class probabilities or None, whether logprobs gave them) of one reply; None is an abstention."""
        try:
            choice = reply["choices"][0]
            content = (choice.get("message") or {}).get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            return None, False
        words = [w.lower() for w in self.prompt.label_words]
        candidates = (((choice.get("logprobs") or {}).get("content") or [{}])[0] or {}).get("top_logprobs")
        if isinstance(candidates, list) and candidates:
            per_class = np.zeros(len(words))
            for candidate in candidates:
                try:
                    token, logprob = str(candidate["token"]).strip().lower(), float(candidate["logprob"])
                except (KeyError, TypeError, ValueError):
                    continue
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
        from .sampling import DECLINED

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

    def run_note(self) -> str:
        """Requests, answers from the cache, retries, tokens and cost of this run, for the run's notes."""
        u = self.usage
        cost = (u["input_tokens"] * self.price_per_million_input_tokens
                + u["output_tokens"] * self.price_per_million_output_tokens) / 1e6
        note = (f"{self.card.name}: {u['requests']} requests to {redact(self.base_url)} ({u['retries']} retried), "
                f"{u['cached']} answers from the response cache; {u['input_tokens']} input and {u['output_tokens']} "
                f"output tokens" + (f", about ${cost:.4f}" if cost else ""))
        if u["without_logprobs"]:
            note += (f"; {u['without_logprobs']} answers came without logprobs (probabilities from the answer "
                     f"word alone: AUROC means little)")
        return note


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
