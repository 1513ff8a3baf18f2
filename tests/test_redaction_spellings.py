"""The key hidden in every spelling (issue 62): any run of 8 of its characters, not only a prefix; wrapped over lines;
as HTML entities, hex, JSON and URL escapes; a short key ("1", a local server's) never hidden inside a reply; a key
read stripped from its variable, and one that cannot go in a header refused without being shown."""
from __future__ import annotations

import base64
import html
import json
import random
import string
import time
import urllib.parse

import pytest

from pytest_memerobust.detectors.hosted import HostedDetector, api_key
from pytest_memerobust.detectors.redaction import PREFIX_CHARS, redact, redact_json_text
from pytest_memerobust.errors import ConfigError
from test_hosted import card

KEY = "plainLocalKey/Hunter2+zz&Q7x"  # 27 characters, with the ones encoders escape: / + &
BEFORE, AFTER = "the server said: invalid key", "was given; see the docs"


def leaks(text: str, key: str = KEY) -> list[str]:
    """Every window of PREFIX_CHARS of `key` that `text` still holds, as it reads, after HTML entities are decoded,
    and with its whitespace removed."""
    readings = {text, html.unescape(text)}
    readings |= {"".join(reading.split()) for reading in readings}
    windows = {key[i : i + PREFIX_CHARS] for i in range(len(key) - PREFIX_CHARS + 1)}
    return sorted(w for w in windows if any(w in reading for reading in readings))


def _shown(spelled: str, key: str = KEY) -> str:
    """`spelled` between ordinary text, redacted; the ordinary text is asserted kept."""
    shown = redact(f"{BEFORE} {spelled} {AFTER}", [key])
    assert shown.startswith(f"{BEFORE} ") and shown.endswith(f" {AFTER}") and "***" in shown, shown
    return shown


def test_a_prefix():
    assert leaks(_shown(KEY[:12])) == []


def test_a_suffix():
    """Only prefixes were matched: a key cut at its start (a message clipped at its front) leaked."""
    assert leaks(_shown(KEY[-17:])) == []


def test_an_inner_run_of_8():
    assert leaks(_shown(KEY[6:14])) == []


@pytest.mark.parametrize("newline", ["\n", "\r\n", " ", "\t", " \r\n  "])
def test_a_key_split_over_lines_or_by_spaces(newline):
    assert leaks(_shown(KEY[:10] + newline + KEY[10:])) == []


def test_a_27_character_key_split_over_two_lines_of_an_error_body_leaks_nothing():
    """The second line's 17 characters were printed: the key's first 10 are no prefix of it."""
    body = json.dumps({"error": {"message": f"Incorrect API key: {KEY[:10]}\n{KEY[10:]}", "code": 401}}, indent=2)
    for lines in (body, body.replace("\\n", "\n")):  # the newline JSON-escaped, and as a server sends it raw
        shown = redact(lines, [KEY])
        assert leaks(shown) == [] and '"code": 401' in shown and "Incorrect API key: ***" in shown, shown


def test_html_decimal_entities():
    assert leaks(_shown("".join(f"&#{ord(c)};" for c in KEY))) == []


def test_html_hex_entities_lower_and_upper_x():
    assert leaks(_shown(KEY.replace("/", "&#x2F;").replace("+", "&#X2b;").replace("&Q", "&#x26;Q"))) == []


def test_html_named_entities():
    """As Go's html/template and OWASP's encoders write them: &amp; &sol; &plus; (and &quot; around it)."""
    spelled = KEY.replace("&", "&amp;").replace("/", "&sol;").replace("+", "&plus;")
    assert leaks(_shown(f"&quot;{spelled}&quot;")) == []


@pytest.mark.parametrize("case", [str.lower, str.upper])
def test_hex(case):
    assert leaks(_shown(case(KEY.encode().hex())), KEY.encode().hex()) == []


def test_an_inner_run_of_16_hex_digits():
    hexed = KEY.encode().hex()
    assert leaks(_shown(hexed[10:26]), hexed) == []


def test_base64_still():
    for encoded in (base64.b64encode(KEY.encode()), base64.b64encode(f"user:{KEY}".encode())):
        assert base64.b64encode(KEY.encode()).decode()[:12] not in _shown(encoded.decode())


def test_json_u_escapes():
    assert leaks(_shown("".join(f"\\u{ord(c):04x}" for c in KEY))) == []


def test_percent_encoded_once_and_twice():
    once = urllib.parse.quote(KEY, safe="")
    assert leaks(_shown(once)) == [] and leaks(_shown(urllib.parse.quote(once, safe=""))) == []


def test_a_one_character_key_leaves_a_reply_unchanged():
    """Every valid reply of a local server whose key is "1" was corrupted: each 1 in it hidden."""
    reply = '{"choices": [{"logprobs": 1.5}], "id": 12345}'
    assert redact_json_text(reply, ["1"]) == reply
    assert redact("http://127.0.0.1:8000/v1/chat/completions (model 'm')", ["1"]).startswith("http://127.0.0.1:8000")
    assert redact("Authorization: Bearer 1", ["1"]) == "Authorization: Bearer ***"


def test_redacting_a_megabyte_is_fast():
    rng = random.Random(62)
    text = "".join(rng.choices(string.printable, k=2**20))
    key = "".join(rng.choices(string.ascii_letters + string.digits, k=40))
    started = time.perf_counter()
    shown = redact(text[:2**19] + key[:20] + "\n" + key[20:] + text[2**19:], [key])
    assert time.perf_counter() - started < 3 and leaks(shown, key) == []  # ~0.3 s; 3 for a loaded machine


def test_a_key_read_with_its_trailing_newline_is_stripped(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", f"  {KEY}\r\n")
    assert api_key("OPENAI_API_KEY") == KEY


@pytest.mark.parametrize("bad", ["\x1b", "\x7f", "\x85", "\n", "\u20ac"])
def test_a_key_that_cannot_go_in_a_header_is_refused_without_showing_it(monkeypatch, bad):
    monkeypatch.setenv("MY_ENDPOINT_KEY", KEY[:13] + bad + KEY[13:])
    for refused in (lambda: api_key("MY_ENDPOINT_KEY"),
                    lambda: HostedDetector(card("http://127.0.0.1:1/v1", api_key_env="MY_ENDPOINT_KEY"))):
        with pytest.raises(ConfigError) as err:
            refused()
        message = str(err.value)
        assert "$MY_ENDPOINT_KEY" in message and "HTTP header" in message and leaks(message) == [], message
