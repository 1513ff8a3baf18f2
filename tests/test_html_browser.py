"""The HTML report in a real browser: headless chromium loads a report the plugin wrote and must log no error, show
every thumbnail and draw the heat map; and a reviewer's first screen (1200 x 900) must show the verdict and the
contents, whose links resolve. String checks of the page (tests/test_report.py, tests/test_report_reading.py)
cannot see any of that. Set MEMEROBUST_SCREENSHOTS=DIR to keep the first screen's PNG for a person to look at.

Chromium is driven over --remote-debugging-pipe: the DevTools protocol as NUL-terminated JSON on file descriptors 3
and 4. It needs no websocket client, no chromedriver and no free port, and reports the console and rendering
errors (e.g. a bad SVG attribute) that --enable-logging output only hints at. Skips when no chromium is found
(.ci/run installs it where apt can)."""
import base64
import fcntl
import io
import json
import os
import select
import shutil
import signal
import time

import numpy as np
import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash
from PIL import Image

from pytest_memerobust.report import write_report
from pytest_memerobust.report.html import PALETTE

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1200,900", "--remote-debugging-pipe"]

# What the page shows, read by the browser after it loaded: pictures, the heat map (the SVG after its caption; see
# report/html.py) and its cells' fills.
PROBE = """(() => {
  const caption = [...document.querySelectorAll('p')].find(p => p.textContent.startsWith('Accuracy drop'));
  const map = caption && caption.nextElementSibling;
  const box = map && map.getBoundingClientRect();
  return {
    images: [...document.images].map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth})),
    map: map && {tag: map.tagName.toLowerCase(), x: box.x + scrollX, y: box.y + scrollY, width: box.width,
                 height: box.height, fills: [...map.querySelectorAll('rect')].map(r => r.getAttribute('fill'))},
  };
})()"""


def chromium_binary():
    for name in (os.environ.get("CHROME"), "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class Chromium:
    """One headless chromium and one page in it, spoken to over the DevTools pipe."""

    def __init__(self, binary, profile):
        # posix_spawn, not Popen: chromium wants the pipe on fds 3 and 4 exactly. The ends it gets are first moved to
        # fds >= 10, so that putting them on 3 and 4 cannot overwrite one with the other.
        ours_read, theirs_write = os.pipe()
        theirs_read, ours_write = os.pipe()
        theirs = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (theirs_read, theirs_write)]
        self.log = profile / "chromium.log"
        log = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            self.pid = os.posix_spawn(binary, [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                      os.environ, file_actions=[
                                          (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                          (os.POSIX_SPAWN_DUP2, log, 1), (os.POSIX_SPAWN_DUP2, log, 2),
                                          (os.POSIX_SPAWN_DUP2, theirs[0], 3), (os.POSIX_SPAWN_DUP2, theirs[1], 4)])
        finally:
            for fd in (theirs_read, theirs_write, *theirs, log):
                os.close(fd)
        self._read_fd, self._write_fd, self._buffer, self._id, self.events = ours_read, ours_write, b"", 0, []
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", page=True)

    def _message(self, deadline):
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read_fd], [], [], left)[0]:
                raise TimeoutError(f"chromium did not answer; its log:\n{self.log.read_text(errors='replace')[-3000:]}")
            chunk = os.read(self._read_fd, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium exited; its log:\n{self.log.read_text(errors='replace')[-3000:]}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method, page=False, timeout=60, **params):
        """The result of one command; events that arrive meanwhile are kept in self.events."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params, **({"sessionId": self.session} if page else {})}
        os.write(self._write_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._message(deadline)
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def load(self, path):
        """Open a file and wait for its load event (pictures decoded); return the errors it logged meanwhile."""
        self.events.clear()
        navigation = self.send("Page.navigate", page=True, url=path.as_uri())
        assert "errorText" not in navigation, navigation
        deadline = time.monotonic() + 60
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._message(deadline))
        self.send("Runtime.evaluate", page=True, expression="0")  # a round trip: errors logged by now have arrived
        return [e["params"] for e in self.events if e.get("method") == "Runtime.exceptionThrown"
                or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
                or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]

    def evaluate(self, expression):
        return self.send("Runtime.evaluate", page=True, expression=expression, returnByValue=True)["result"]["value"]

    def screenshot(self, x, y, width, height):
        png = self.send("Page.captureScreenshot", page=True, format="png", captureBeyondViewport=True,
                        clip={"x": x, "y": y, "width": width, "height": height, "scale": 1})["data"]
        return Image.open(io.BytesIO(base64.b64decode(png))).convert("RGB")

    def close(self):
        try:
            self.send("Browser.close", timeout=10)
        except Exception:
            pass
        deadline = time.monotonic() + 10
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                break
            time.sleep(0.05)
        os.close(self._read_fd)
        os.close(self._write_fd)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium found (CHROME, chromium, chromium-browser, google-chrome): "
                    "apt-get install chromium to check the HTML report in a browser")
    chromium = Chromium(binary, tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


def test_the_browser_check_sees_errors_and_broken_pictures(browser, tmp_path):
    """The checks below would pass vacuously if the browser reported nothing."""
    page = tmp_path / "broken.html"
    page.write_text('<!doctype html><p>Accuracy drop</p><svg width="40" height="20"><rect width="-5"/></svg>'
                    '<img alt="broken" src="data:image/png;base64,AAAA"><script>console.error("boom")</script>')
    errors = browser.load(page)
    texts = [e.get("entry", {}).get("text", "") for e in errors] + [e.get("args", [{}])[0].get("value", "")
                                                                     for e in errors]
    assert any("negative value" in t for t in texts) and "boom" in texts, errors
    assert browser.evaluate(PROBE)["images"] == [{"alt": "broken", "complete": True, "width": 0}]


def test_the_html_report_renders_with_thumbnails_and_heat_map_and_no_errors(browser, pytester):
    # A grid cell (typos x ImageNet-C) for the heat map, a single perturbation for the bars and the worst examples.
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-limit=24", "--memerobust-bootstrap=50",
                                "-p", "no:cacheprovider", "--memerobust-report=out.html",
                                "-k", "rainbow and (clean or typos-1 or typos-3+imagenet_c-3)")
    result.assert_outcomes(passed=3)
    errors = browser.load(pytester.path / "out.html")
    assert errors == []
    shown = browser.evaluate(PROBE)

    assert shown["images"], "the report has no thumbnails"
    assert [i for i in shown["images"] if not (i["complete"] and i["width"] > 0)] == []

    heat = shown["map"]
    assert heat and heat["tag"] == "svg" and heat["width"] > 0 and heat["height"] > 0, heat
    assert heat["fills"], "the heat map has no cells"
    pixels = np.asarray(browser.screenshot(heat["x"], heat["y"], heat["width"], heat["height"]), dtype=int)
    assert (pixels.min(axis=2) < 200).sum() > 100, "the heat map area is blank"
    # Each cell wears its case's verdict colour (the run recorded one per case), and the colours reach the screen.
    light = {colour for _, colour in PALETTE.values()}
    assert set(heat["fills"]) <= light | {"#f6f8fa"}, heat["fills"]
    for fill in set(heat["fills"]) & light:
        rgb = np.array([int(fill[k:k + 2], 16) for k in (1, 3, 5)])
        assert (abs(pixels - rgb).max(axis=2) <= 3).sum() > 100, f"no cell drawn in {fill}"


# The first screen, read by the browser: where the verdict banner, the contents and the first model's counts are,
# and whether every in-page link has its target.
FIRST_SCREEN = """(() => {
  const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
                     return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, width: r.width}; };
  const banner = document.querySelector('.banner');
  const links = [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href').slice(1));
  return {
    height: innerHeight, width: innerWidth,
    banner: box(banner), bannerText: banner && banner.innerText,
    contents: box(document.querySelector('nav#contents')),
    contentLinks: [...document.querySelectorAll('nav#contents a')].map(a => ({href: a.getAttribute('href').slice(1),
                                                                              box: box(a)})),
    models: box(document.querySelector('table.models')),
    unresolved: links.filter(id => !document.getElementById(id)),
    suites: [...document.querySelectorAll('main > section[id]')].map(s => s.id),
    captionFont: getComputedStyle(document.querySelector('.cap')).fontFamily,
    scrollWidth: document.documentElement.scrollWidth,
  };
})()"""


@pytest.fixture(scope="module")
def verdict_page(tmp_path_factory):
    from verdict_sample import two_suite_report, with_verdict

    path = tmp_path_factory.mktemp("verdict-page") / "report.html"
    write_report(path, with_verdict(two_suite_report(), baseline=True))
    return path


def test_the_first_screen_shows_the_verdict_and_contents_whose_links_resolve(browser, verdict_page, tmp_path):
    # a laptop's screen, whatever room the headless window leaves for its own bars
    browser.send("Emulation.setDeviceMetricsOverride", page=True, width=1200, height=900, deviceScaleFactor=1,
                 mobile=False)
    try:
        errors = browser.load(verdict_page)
        shown = browser.evaluate(FIRST_SCREEN)
        screen = browser.screenshot(0, 0, 1200, 900)
    finally:
        browser.send("Emulation.clearDeviceMetricsOverride", page=True)
    assert errors == []
    height, width = shown["height"], shown["width"]
    assert (width, height) == (1200, 900), "the window is not the size this test reasons about"

    # the banner, whole, near the top of the first screen, with the verdict and the recorded summary
    banner = shown["banner"]
    assert banner and 0 <= banner["top"] and banner["bottom"] <= height / 3, banner
    assert "FAIL" in shown["bannerText"] and "of" in shown["bannerText"] and "gate:" in shown["bannerText"]
    # and, below it, the whole table of counts per model
    assert shown["models"] and banner["bottom"] <= shown["models"]["top"] < shown["models"]["bottom"] <= height, \
        shown["models"]
    # the contents: visible beside the verdict, every entry on the first screen, every in-page link resolving
    contents = shown["contents"]
    assert contents and contents["width"] > 100 and contents["right"] <= banner["left"], contents
    assert shown["contentLinks"] and all(0 <= a["box"]["top"] and a["box"]["bottom"] <= height
                                         for a in shown["contentLinks"]), shown["contentLinks"]
    assert shown["unresolved"] == []
    hrefs = [a["href"] for a in shown["contentLinks"]]
    # the skipped cases listed after the failing ones, on the verdict's screen (issue 62)
    assert hrefs[:4] == ["verdict", "failing", "skipped", "baseline"] and hrefs[-1] == "run-details"
    # suites in order of severity: the harsh suite (failing cases) first; the run's details last
    assert shown["suites"].index("harsh-demo-on-demo") < shown["suites"].index("mild-demo-on-demo")
    assert shown["suites"][-1] == "run-details"
    # nothing wider than the window (no sideways scrolling to read the page)
    assert shown["scrollWidth"] <= width
    # captions are set in fonts that have look-alike letters
    assert "DejaVu Sans Mono" in shown["captionFont"]

    screen.save(tmp_path / "first-screen.png")
    keep = os.environ.get("MEMEROBUST_SCREENSHOTS")
    if keep:
        os.makedirs(keep, exist_ok=True)
        screen.save(os.path.join(keep, "first-screen.png"))
    # the FAIL verdict's colour reaches the screen, in the banner
    pixels = np.asarray(screen, dtype=int)
    top, bottom, left, right = (int(banner[k]) for k in ("top", "bottom", "left", "right"))
    area = pixels[top:bottom, left:right]
    strong = np.array([int(PALETTE["fail for sure"][0][k:k + 2], 16) for k in (1, 3, 5)])
    assert (abs(area - strong).max(axis=2) <= 40).sum() > 200, "the banner's FAIL colour is not drawn"
