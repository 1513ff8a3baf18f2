"""The HTML report in a real browser: headless chromium loads a report the plugin wrote and must log no error, show
every thumbnail and draw the heat map. String checks of the page (tests/test_report.py) cannot see any of that.

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
    # A cell whose accuracy dropped is tinted red (rgb(255, g, g)), and the tint must reach the screen.
    tinted = [f for f in heat["fills"] if f.startswith("rgb(") and int(f[4:-1].split(",")[1]) < 235]
    if tinted:
        r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
        assert ((r > 240) & (r - g > 15) & (abs(g - b) < 8)).any(), "no tinted cell is drawn"
