"""One rate limit for a whole run against a hosted endpoint: the request times a 127.0.0.1 server logs, for a run in
one process, on 2 pool workers (--memerobust-workers=2) and on 2 pytest-xdist workers (-n 2), at a card's
`requests_per_second`. Prints per run the requests, the span, the mean rate, the busiest 1 s window (half open) and
the requests the run's note counted.

    python bench/hosted_rate.py --rate 20 --memes 64
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SELECTION = "rainbow and (typos-3 or imagenet_c-3) and not hotflip and not universal and not uap"


class Logged(BaseHTTPRequestHandler):
    """Answers every request "Yes" with logprobs, logging its arrival time."""

    times: list[float] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.times.append(time.time())
        top = [{"token": "Yes", "logprob": -0.1}, {"token": "No", "logprob": -2.4}]
        payload = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Yes"},
                                           "logprobs": {"content": [{"token": "Yes", "logprob": -0.1,
                                                                     "top_logprobs": top}]}}],
                              "usage": {"prompt_tokens": 100, "completion_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def busiest_second(times: list[float]) -> int:
    times = sorted(times)
    return max((sum(1 for u in times[k:] if u < t + 1.0) for k, t in enumerate(times)), default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--memes", type=int, default=64)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Logged)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    with tempfile.TemporaryDirectory() as folder:
        card = Path(folder, "paced.toml")
        card.write_text(f'name = "paced"\narchitecture = "hosted"\nclasses = ["non-hateful", "hateful"]\n[params]\n'
                        f'base_url = "{url}"\nmodel = "m"\nrequests_per_second = {args.rate}\n')
        Path(folder, "conftest.py").write_text("from pytest_memerobust.engine import executors\n"
                                               "executors.POOL_START_S = 0  # every pass on the pool\n")
        env = {**os.environ, "OPENAI_API_KEY": "bench-key-0123456789"}
        env.pop("PYTEST_XDIST_WORKER", None)
        print(f"requests_per_second = {args.rate:g}, {args.memes} demo memes, -k {SELECTION!r}")
        for name, extra in (("one process", ["--memerobust-workers=1"]), ("2 pool workers", ["--memerobust-workers=2"]),
                            ("-n 2", ["-n", "2"])):
            Logged.times = []
            run = subprocess.run([sys.executable, "-m", "pytest", f"--memerobust-model={card}",
                                  f"--memerobust-limit={args.memes}", "--memerobust-batch-size=4", "-p",
                                  "no:cacheprovider", "--memerobust-bootstrap=20", "-q", *extra, "-k", SELECTION],
                                 cwd=folder, env=env, capture_output=True, text=True)
            times = sorted(Logged.times)
            noted = re.findall(r"paced: (\d+) requests to ", run.stdout)
            span = times[-1] - times[0] if len(times) > 1 else float("nan")
            print(f"{name:15s} exit {run.returncode}: {len(times)} requests in {span:.2f} s, mean "
                  f"{(len(times) - 1) / span:.2f}/s, busiest 1 s window {busiest_second(times)}; the note counted "
                  f"{', '.join(noted) or 'none'}")
    server.shutdown()
    server.server_close()


if __name__ == "__main__":
    main()
