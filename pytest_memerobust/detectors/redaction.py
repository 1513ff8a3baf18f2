"""Secrets out of any text that leaves the run (errors, replies, cached answers, notes, reports): the one place that
knows how a key may be spelled once a server or library has echoed it.

A server echoes a key the way its encoder writes strings: JSON with escaped slashes (`\\/`, PHP's and Go's default)
or `\\u002b`-style escapes, URL-encoded (`%2F`, `%2B`, `+` for a space), HTML entities (`&#43;`, `&#x2F;`, `&sol;`:
Go's html/template, OWASP's encoders), hex (the key's bytes), base64 (a Basic credential "user:key"), wrapped over
lines, or cut off where a message was clipped. `redact` finds any run of PREFIX_CHARS or more of the key's characters
(prefix, suffix or inner run) in each of these spellings, whitespace between them skipped, and hides it; generic
patterns catch credentials it was not told about.

A key shorter than PREFIX_CHARS (a local vLLM or TGI server's "1") cannot be told from content: it is never hidden
in a reply's text, which is parsed and cached, and in a message only where it stands alone as a token (and after
`Bearer`, as any credential).
"""
from __future__ import annotations

import base64
import bisect
import html
import re
import urllib.parse
from itertools import accumulate

HIDDEN = "***"
PREFIX_CHARS = 8  # a run of the key's characters this long is hidden; a shorter key only as a whole token
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]+@")  # up to the authority's last @ (p@ss too)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[a-z0-9._~+/=-]+")
_BASIC = re.compile(r"(?i)\b(basic\s+)(?=[a-z]*[0-9+/=])[a-z0-9+/]{8,}=*")  # base64, not "Basic authentication"
_KEY_LIKE = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}")  # OpenAI, Anthropic and look-alike API keys
_SECRET_FIELDS = re.compile(r"(?i)\b([\w-]*(?:api[_-]?key|token|secret|password|passwd)[\w-]*[\"']?\s*[:=]\s*[\"']?)"
                            r"([a-z0-9._~+/=-]{8,})")
_BASE64_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
# one spelled character (JSON, Python, URL once or twice, HTML) or a run of whitespace, which a match skips; the
# lookahead lets the regex engine skip to the characters that may begin one
_UNITS = (r"\\[uU][0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|\\[\s\S]|%25[0-9a-fA-F]{2}|%[0-9a-fA-F]{2}"
          r"|&#[0-9]{1,7};?|&#[xX][0-9a-fA-F]{1,6};?|&[A-Za-z][A-Za-z0-9]{1,31};|\s+")
_SPELLED = re.compile(rf"(?=[\\%&\s])({_UNITS})")
_SPELLED_PLUS = re.compile(rf"(?=[\\%&\s+])({_UNITS}|\+)")  # ... and `+`, a URL-encoded space: a key with a space
_JSON_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_SHORT_TOKEN = r"(?<![^\s\"'`=]){}(?![^\s\"'`.,;&])"  # a short key alone: after a space, quote or =, before one
# a query parameter of a URL whose value is a credential (api_key, key, token, access_token, sig, password, auth...)
SECRET_QUERY_NAME = re.compile(r"(?i)^(?:.*(?:key|token|secret|passw|pwd|auth|credential|signature)|sig|code)$")


def redact(text: str, secrets=(), *, reply: bool = False) -> str:
    """`text` with secrets replaced by ***: each of `secrets` (the API key) in any spelling `hide_secrets` knows, the
    user:password of any URL, Bearer and Basic credentials, sk-... style keys and the value of a
    key/token/secret/password field of 8+ characters. A `reply`'s text (kept or cached) keeps a short key: see above."""
    text = hide_secrets(text, secrets)
    if not reply:
        text = _hide_short(text, secrets)
    text = _USERINFO.sub(rf"\1{HIDDEN}@", text)
    text = _BASIC.sub(rf"\1{HIDDEN}", _BEARER.sub(rf"\1{HIDDEN}", text))
    text = _KEY_LIKE.sub(HIDDEN, text)
    return _SECRET_FIELDS.sub(rf"\1{HIDDEN}", text)


def redact_json_text(text: str, secrets=()) -> str:
    """A JSON reply's text with the secrets hidden and the JSON kept valid (what is cached and parsed): `redact`
    less its key/token field rule, which would also hide a reply's own `"completion_tokens": 12345678` and a
    logprob's `"token": "Nonetheless"`, and less a short key, which would hide every `1` of it."""
    text = hide_secrets(text, secrets)
    text = _USERINFO.sub(rf"\1{HIDDEN}@", text)
    return _KEY_LIKE.sub(HIDDEN, _BASIC.sub(rf"\1{HIDDEN}", _BEARER.sub(rf"\1{HIDDEN}", text)))


def hide_secrets(text: str, secrets) -> str:
    """`text` with each of `secrets` of PREFIX_CHARS characters or more hidden wherever any run of PREFIX_CHARS of
    its characters appears: literally, spelled as `_unit` reads (JSON, URL once or twice, HTML entities), wrapped
    over lines, as hex, or base64-encoded (alone or inside a longer encoded string, standard or URL-safe alphabet)."""
    for secret in sorted({s for s in secrets if s and len(s) >= PREFIX_CHARS}, key=len, reverse=True):
        text = _hide_spelled(text.replace(secret, HIDDEN), secret)
        for core in _base64_cores(secret):
            text = _hide_encoded(text, core)
    return text


def _hide_short(text: str, secrets) -> str:
    """`text` with each of `secrets` shorter than PREFIX_CHARS hidden where it stands alone as a token (a message's
    `key: s3cr3t`), never inside a word, a number or an address (the "1" of 127.0.0.1)."""
    for secret in {s.strip() for s in secrets if s and len(s) < PREFIX_CHARS} - {""}:
        text = re.sub(_SHORT_TOKEN.format(re.escape(secret)), HIDDEN, text)
    return text


def _unit(spelled: str) -> str:
    """What one match of _SPELLED stands for: `\\uXXXX`, `\\xXX`, `\\/` and other JSON escapes, `%XX` and `%25XX`
    (URL-encoded once or twice), an HTML entity (`&#43;`, `&#x2F;`, `&amp;`, `&sol;`), or nothing for whitespace
    (and a URL-encoded space), which a match skips so that a key wrapped over lines is still found."""
    c = spelled[0]
    if c == "\\":
        if len(spelled) > 2:
            return chr(int(spelled[2:], 16))
        spelled = _JSON_ESCAPES.get(spelled[1], spelled[1])
    elif c == "%":
        spelled = chr(int(spelled[-2:], 16))
    elif c == "&":
        spelled = html.unescape(spelled)
    else:
        return ""
    return "".join(spelled.split())


class _Spelled:
    """`text` read as the characters it spells (each match of `pattern` replaced by its `_unit`, whitespace gone),
    with the way back: which span of `text` spells a span of those characters. Split and summed in C: a reply of
    a megabyte has a hundred thousand runs of whitespace."""

    def __init__(self, text: str, pattern: re.Pattern):
        parts = pattern.split(text)  # text, spelled unit, text, ..., text (the pattern is one group)
        self.at = list(accumulate(map(len, parts), initial=0))  # where each part begins in `text`
        parts[1::2] = map(_unit, parts[1::2])
        self.spelled_at = list(accumulate(map(len, parts), initial=0))  # ... and in self.text
        self.text = "".join(parts)

    def source(self, i: int) -> tuple[int, int]:
        """The span of the original text that spells self.text[i]: a whole unit, or the one character."""
        k = bisect.bisect_right(self.spelled_at, i) - 1
        if k % 2:
            return self.at[k], self.at[k + 1]
        i += self.at[k] - self.spelled_at[k]
        return i, i + 1


def _hide_spelled(text: str, secret: str) -> str:
    """`text` with every run of PREFIX_CHARS or more of `secret`'s characters (prefix, suffix or inner run), spelled
    as `_unit` reads with whitespace between them, or PREFIX_CHARS of its bytes or more as lower- or uppercase hex,
    replaced by HIDDEN: each such run holds one of the secret's PREFIX_CHARS-long windows, found by str.find (linear
    in the text, one pass a window)."""
    plain = "".join(secret.split())
    hexed = secret.encode("utf-8", "surrogatepass").hex()
    windows = {plain[i : i + PREFIX_CHARS] for i in range(len(plain) - PREFIX_CHARS + 1)}
    for digits in (hexed, hexed.upper()):  # PREFIX_CHARS bytes, twice as many hex digits, from a byte's first
        windows |= {digits[i : i + 2 * PREFIX_CHARS] for i in range(0, len(digits) - 2 * PREFIX_CHARS + 1, 2)}
    spelled = _Spelled(text, _SPELLED_PLUS if plain != secret and "+" not in secret else _SPELLED)
    found = []
    for window in windows:
        at = spelled.text.find(window)
        while at >= 0:
            found.append((at, at + len(window)))
            at = spelled.text.find(window, at + 1)
    runs: list[list[int]] = []
    for start, end in sorted(found):
        if runs and start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    out, kept = [], 0
    for start, end in runs:
        start, end = spelled.source(start)[0], spelled.source(end - 1)[1]
        if start >= kept:  # (two runs spelled in one unit, an entity, are hidden as one)
            out += [text[kept:start], HIDDEN]
        kept = max(kept, end)
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
