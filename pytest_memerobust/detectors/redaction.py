"""Secrets out of any text that leaves the run (errors, replies, cached answers, notes, reports): the one place that
knows how a key may be spelled once a server or library has echoed it.

A server echoes a key the way its encoder writes strings: JSON with escaped slashes (`\\/`, PHP's and Go's default)
or `\\u002b`-style escapes, URL-encoded (`%2F`, `%2B`, `+` for a space), base64 (a Basic credential "user:key"), or cut
off where a message was clipped. `redact` finds the key in each of these spellings, and a prefix of it of
PREFIX_CHARS characters or more, and hides it; generic patterns catch credentials it was not told about.
"""
from __future__ import annotations

import base64
import re
import urllib.parse

HIDDEN = "***"
PREFIX_CHARS = 8  # a run of the key's first characters this long (or the whole of a shorter key) is hidden
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]+@")  # up to the authority's last @ (p@ss too)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[a-z0-9._~+/=-]+")
_BASIC = re.compile(r"(?i)\b(basic\s+)(?=[a-z]*[0-9+/=])[a-z0-9+/]{8,}=*")  # base64, not "Basic authentication"
_KEY_LIKE = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}")  # OpenAI, Anthropic and look-alike API keys
_SECRET_FIELDS = re.compile(r"(?i)\b([\w-]*(?:api[_-]?key|token|secret|password|passwd)[\w-]*[\"']?\s*[:=]\s*[\"']?)"
                            r"([a-z0-9._~+/=-]{8,})")
_BASE64_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
# a query parameter of a URL whose value is a credential (api_key, key, token, access_token, sig, password, auth...)
SECRET_QUERY_NAME = re.compile(r"(?i)^(?:.*(?:key|token|secret|passw|pwd|auth|credential|signature)|sig|code)$")


def redact(text: str, secrets=()) -> str:
    """`text` with secrets replaced by ***: each of `secrets` (the API key) in any spelling `hide_secret` knows, the
    user:password of any URL, Bearer and Basic credentials, sk-... style keys and the value of a
    key/token/secret/password field of 8+ characters."""
    text = hide_secrets(text, secrets)
    text = _USERINFO.sub(rf"\1{HIDDEN}@", text)
    text = _BASIC.sub(rf"\1{HIDDEN}", _BEARER.sub(rf"\1{HIDDEN}", text))
    text = _KEY_LIKE.sub(HIDDEN, text)
    return _SECRET_FIELDS.sub(rf"\1{HIDDEN}", text)


def redact_json_text(text: str, secrets=()) -> str:
    """A JSON reply's text with the secrets hidden and the JSON kept valid (what is cached and parsed): `redact`
    less its key/token field rule, which would also hide a reply's own `"completion_tokens": 12345678` and a
    logprob's `"token": "Nonetheless"`."""
    text = hide_secrets(text, secrets)
    text = _USERINFO.sub(rf"\1{HIDDEN}@", text)
    return _KEY_LIKE.sub(HIDDEN, _BASIC.sub(rf"\1{HIDDEN}", _BEARER.sub(rf"\1{HIDDEN}", text)))


def hide_secrets(text: str, secrets) -> str:
    """`text` with each of `secrets` hidden wherever it appears: literally, JSON-escaped, URL-encoded (once or
    twice), base64-encoded (alone or inside a longer encoded string, standard or URL-safe alphabet), and any prefix
    of PREFIX_CHARS characters or more (a key cut where a message was clipped)."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = _hide_spelled(text.replace(secret, HIDDEN), secret)
        for core in _base64_cores(secret):
            text = _hide_encoded(text, core)
    return text


def _unit(text: str, i: int) -> tuple[str, int] | None:
    """The character that text[i:] spells and where its spelling ends: `\\uXXXX`, `\\/` and other JSON escapes,
    `%XX` and `%25XX` (URL-encoded once or twice), `+` (a URL-encoded space), or the character itself."""
    c = text[i]
    if c == "\\" and i + 1 < len(text):
        if text[i + 1] in "uU" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
            return chr(int(text[i + 2 : i + 6], 16)), i + 6
        return {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.get(text[i + 1], text[i + 1]), i + 2
    if c == "%":
        twice = text[i + 1 : i + 3] == "25"
        digits = text[i + 3 : i + 5] if twice else text[i + 1 : i + 3]
        if re.fullmatch(r"[0-9a-fA-F]{2}", digits):
            return chr(int(digits, 16)), i + (5 if twice else 3)
    return c, i + 1


def _hide_spelled(text: str, secret: str) -> str:
    """`text` with every spelling of `secret` that `_unit` reads, or of a prefix of it of PREFIX_CHARS characters
    or more (the whole of a shorter secret), replaced by HIDDEN."""
    least = min(PREFIX_CHARS, len(secret))
    first = {secret[0], "\\", "%"} | ({"+"} if secret[0] == " " else set())
    starts = re.compile("|".join(map(re.escape, sorted(first))))  # where a spelling may begin, found in C
    out, i, kept = [], 0, 0
    while True:
        found = starts.search(text, i)
        if found is None:
            break
        i = found.start()
        matched, j = 0, i
        while matched < len(secret) and j < len(text):
            unit = _unit(text, j)
            char = " " if text[j] == "+" and secret[matched] == " " else unit[0]
            if char != secret[matched]:
                break
            matched, j = matched + 1, unit[1]
        if matched >= least:
            out += [text[kept:i], HIDDEN]
            i = kept = j
        else:
            i += 1
    out.append(text[kept:])
    return "".join(out)


def _base64_cores(secret: str) -> list[str]:
    """What every base64 string that encodes `secret` at some byte offset (so "user:key" too) holds, in the standard
    and URL-safe alphabets: for each of the 3 offsets, the characters that depend on the secret's bytes alone."""
    raw = secret.encode("utf-8", "surrogatepass")
    cores = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode().rstrip("=")
        start = (0, 2, 3)[shift]  # characters that mix in the bytes before the secret
        end = len(encoded) - (1 if (shift + len(raw)) % 3 else 0)  # ... and the bytes after it
        core = encoded[start:end]
        if len(core) < PREFIX_CHARS:
            continue
        cores += sorted({core, core.replace("+", "-").replace("/", "_")})
    return cores


def _hide_encoded(text: str, core: str) -> str:
    """`text` with each base64 string that holds `core` replaced by HIDDEN, whole (found with str.find and widened
    by hand: a regex widening both ways is quadratic on a long base64 run, such as a picture echoed back)."""
    out, kept, at = [], 0, text.find(core)
    while at >= 0:
        start, end = at, at + len(core)
        while start > kept and text[start - 1] in _BASE64_SET:
            start -= 1
        while end < len(text) and text[end] in _BASE64_SET:
            end += 1
        while end < len(text) and text[end] == "=":
            end += 1
        out += [text[kept:start], HIDDEN]
        kept = end
        at = text.find(core, end)
    out.append(text[kept:])
    return "".join(out)


def secret_query_parameters(url: str) -> list[str]:
    """The names of `url`'s query parameters whose values are credentials (`?api_key=...`, `key=`, `token=`...)."""
    query = urllib.parse.urlsplit(url).query
    return [name for name, _ in urllib.parse.parse_qsl(query, keep_blank_values=True)
            if SECRET_QUERY_NAME.match(name.strip())]
