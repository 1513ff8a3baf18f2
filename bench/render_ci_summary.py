"""Render what reviewers see of a real gated demo run, the CI job summary and the pull-request comment, as PNGs for
docs/gate.md, so a change to report/ci.py can be looked at before it reaches a pull request.

    python bench/render_ci_summary.py [--images docs/images] [--work DIR]   (needs chromium: apt-get install chromium)

The run is the commands a user types, as subprocesses: `memerobust train` makes a candidate (the demo card, 3 epochs,
leetspeak-augmented), `pytest --memerobust-save-baseline` saves the shipped demo checkpoint's baseline, and the gated
`pytest --memerobust-baseline --memerobust-report=report.json` run appends its section to a $GITHUB_STEP_SUMMARY file,
as in a GitHub Actions step; `memerobust pr-comment --dry-run` prints the comment's body. The Markdown becomes HTML
with markdown-it-py (a dependency of rich, already installed) and a few lines of GitHub-like CSS, then a screenshot in
headless Chromium, cropped to the content. The summary is drawn with its folded sections open, the comment as a
reviewer first sees it (folded). The demo memes are generated: the numbers are the demo world's, not real memes'.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SUITE = """[suite]
name = "review"
[text]
typos = [2, 5]
homoglyphs = [3]
leetspeak = [3]
[image]
contrast = [3]
jpeg_compression = [4]
gaussian_noise = [3]
"""
RUN = ["--memerobust-model=demo", "--memerobust-limit=200", "--memerobust-gate-resamples=2000", "-p",
       "no:cacheprovider", "-q"]
CANDIDATE = ["--augment", "leetspeak@3-5:0.8", "--epochs", "3"]  # under-trained: clean worse, one thing better
GITHUB = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "octo-org/meme-detector",
          "GITHUB_RUN_ID": "9876543210"}  # the comment links the run; example values

CSS = """
body { margin: 0; background: #f6f8fa; font: 14px/1.5 -apple-system, "Segoe UI", "Liberation Sans", "DejaVu Sans",
       sans-serif; color: #1f2328; }
.frame { width: 900px; margin: 16px; background: #fff; border: 1px solid #d1d9e0; border-radius: 6px; }
.head { padding: 8px 16px; background: #f6f8fa; border-bottom: 1px solid #d1d9e0; border-radius: 6px 6px 0 0;
        color: #59636e; }
.head b { color: #1f2328; }
.body { padding: 8px 16px 12px; }
h3 { font-size: 1.25em; margin: 8px 0 12px; padding-bottom: .3em; border-bottom: 1px solid #d1d9e0; }
p, blockquote, table, details, ul { margin: 0 0 12px; }
blockquote { padding: 0 1em; color: #59636e; border-left: .25em solid #d1d9e0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 5px 12px; border: 1px solid #d1d9e0; }
th { font-weight: 600; background: #f6f8fa; }
tr:nth-child(2n) td { background: #f6f8fa; }
code { font: 12px "DejaVu Sans Mono", "Liberation Mono", monospace; padding: .2em .4em; background: #eff1f3;
       border-radius: 6px; }
ul { padding-left: 2em; }
li { margin: .15em 0; }
summary { cursor: pointer; }
a { color: #0969da; text-decoration: none; }
sub { color: #59636e; }
"""


def html_page(markdown: str, head: str, open_details: bool) -> str:
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough").render(markdown)
    if open_details:
        body = body.replace("<details>", "<details open>")
    return (f'<!doctype html><html><head><meta charset="utf-8"><style>{CSS}</style></head><body>'
            f'<div class="frame"><div class="head">{head}</div><div class="body">{body}</div></div></body></html>')


def screenshot(html: Path, png: Path) -> None:
    """Headless Chromium, off the network and out of the user's profile; then cropped to the page's frame."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("chromium not found: apt-get install chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        "--hide-scrollbars", f"--user-data-dir={profile}", "--window-size=940,3000",
                        f"--screenshot={png}", html.as_uri()], check=True, capture_output=True, timeout=120)
    from PIL import Image, ImageChops

    image = Image.open(png).convert("RGB")
    background = Image.new("RGB", image.size, image.getpixel((image.width - 1, image.height - 1)))
    box = ImageChops.difference(image, background).getbbox()
    if box:
        image = image.crop((0, 0, image.width, min(image.height, box[3] + 16)))
    image.save(png, optimize=True)


def run(command: list[str], cwd: Path, env: dict, ok=(0,)) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode not in ok:
        sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", default=str(Path(__file__).resolve().parents[1] / "docs" / "images"))
    parser.add_argument("--work", help="keep the run's files here (default: a temporary folder)")
    args = parser.parse_args()
    images = Path(args.images).resolve()
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(args.work or temporary).resolve()
        work.mkdir(parents=True, exist_ok=True)
        (work / "memerobust-review.toml").write_text(SUITE)
        summary = work / "step-summary.md"
        summary.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
        memerobust, pytest = [sys.executable, "-m", "pytest_memerobust.cli"], [sys.executable, "-m", "pytest"]
        if not (work / "candidate.safetensors").exists():
            run([*memerobust, "train", "demo", "--data", "demo", "--out", "candidate.safetensors", "--quiet",
                 *CANDIDATE], work, env)
        run([*pytest, *RUN, "--memerobust-save-baseline=baseline.json", "memerobust-review.toml"], work, env)
        gated = run([*pytest, *RUN, "--memerobust-checkpoint=candidate.safetensors",
                     "--memerobust-baseline=baseline.json", "--memerobust-gate=regressions",
                     "--memerobust-report=report.json", "memerobust-review.toml"],
                    work, {**env, "GITHUB_STEP_SUMMARY": str(summary)}, ok=(0, 1))
        print("\n".join(line for line in gated.splitlines() if line.startswith(("against the baseline", "memerobust:",
                                                                                  "PASSED", "FAILED"))))
        comment = run([*memerobust, "pr-comment", "report.json", "--pr", "17", "--dry-run"], work, {**env, **GITHUB})
        pages = [(summary.read_text(), "ci-summary", "<b>robustness</b> · summary", True),
                 (comment, "pr-comment", "<b>github-actions</b> <span>bot</span> commented", False)]
        images.mkdir(parents=True, exist_ok=True)
        for markdown, name, head, open_details in pages:
            (work / f"{name}.md").write_text(markdown)
            html = work / f"{name}.html"
            html.write_text(html_page(markdown, head, open_details), encoding="utf-8")
            screenshot(html, images / f"{name}.png")
            print(f"wrote {images / f'{name}.png'} (from {work / f'{name}.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
