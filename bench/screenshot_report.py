"""Render an HTML report in headless Chromium and save a PNG, to look at what a reader sees.

    python bench/screenshot_report.py out.html out.png     (needs Debian's chromium: apt-get install chromium)
"""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    html, png = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("chromium not found: apt-get install chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as profile:
        # The flags keep Chromium off the network (this machine has none) and out of the user's profile.
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", "--window-size=1200,3000", f"--screenshot={png}",
                        html.as_uri()], check=True, capture_output=True, timeout=120)
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
