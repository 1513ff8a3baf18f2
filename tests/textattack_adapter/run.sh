#!/usr/bin/env bash
# The textattack adapter's tests, in their own environment: textattack 0.3.11's flair caps transformers below 5, which
# the core environment (.venv) does not (see constraints-textattack.txt). Builds .venv-textattack the first time
# (about 3 minutes: torch 2.13.0's CPU build from this machine's disk, textattack and its pins), then runs the tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x .venv-textattack/bin/python ] || python3 -m venv .venv-textattack
.venv-textattack/bin/pip install --quiet -c constraints-textattack.txt -e ".[textattack]"
echo "textattack adapter: its environment was ready in ${SECONDS} s" >&2
.venv-textattack/bin/python -m pytest tests/textattack_adapter "$@"
