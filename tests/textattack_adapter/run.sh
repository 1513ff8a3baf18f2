#!/usr/bin/env bash
# The textattack adapter's tests, in their own environment: textattack 0.3.11's flair caps transformers below 5, which
# the core environment (.venv) does not (see constraints-textattack.txt). Builds .venv-textattack the first time
# (about 3 minutes: torch 2.13.0's CPU build from this machine's disk, textattack and its pins), then runs the tests
# on 2 cores. `--build-only`: build (or check) the environment and stop (scripts/run-tests builds it meanwhile);
# `--built`: run the tests on the environment just built, without checking it again; `--deps-only`: install what
# the environment needs but the plugin itself (.ci/run does so while the set-up step installs .venv: the plugin's
# editable install writes its egg-info into the checkout, which two installs at once would both write).
set -euo pipefail
cd "$(dirname "$0")/../.."
build_only=0 built=0
case "${1:-}" in
  --deps-only)
    # the plugin's requirements and its textattack extra's, read from pyproject.toml (tomllib: Python 3.11 and later;
    # elsewhere the environment's build installs them later, as it would without this step)
    if ! python3 -c "import tomllib" 2>/dev/null; then
        echo "textattack adapter: no tomllib here, nothing installed ahead" >&2
        exit 0
    fi
    [ -x .venv-textattack/bin/python ] || python3 -m venv .venv-textattack
    requirements="$(mktemp)"
    trap 'rm -f "$requirements"' EXIT
    python3 -c '
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["textattack"]))' >"$requirements"
    .venv-textattack/bin/pip install --quiet --disable-pip-version-check --no-compile -c constraints-textattack.txt \
        -r "$requirements" "pytest-xdist>=3.5"
    echo "textattack adapter: its dependencies were installed in ${SECONDS} s" >&2
    exit 0 ;;
  --build-only) build_only=1; shift ;;
  # scripts/run-tests built the environment with --build-only moments before: pip's check again is 15 to 20 s of
  # CI in which nothing else runs
  --built) built=1; shift ;;
esac
if [ "$built" -eq 1 ]; then
    exec .venv-textattack/bin/python -m pytest tests/textattack_adapter -n 2 "$@"
fi
[ -x .venv-textattack/bin/python ] || python3 -m venv .venv-textattack
# --no-compile: pip compiling every module of torch and its neighbours to bytecode is CPU the core tests, running
# meanwhile on the same 2 cores, lose; these tests import a small part of them, compiled when first imported
# (scripts/run-tests lets Python keep what it compiles)
.venv-textattack/bin/pip install --quiet --no-compile -c constraints-textattack.txt -e ".[textattack]" \
    "pytest-xdist>=3.5"
echo "textattack adapter: its environment was ready in ${SECONDS} s" >&2
if [ "$build_only" -eq 1 ]; then
    exit 0
fi
.venv-textattack/bin/python -m pytest tests/textattack_adapter -n 2 "$@"
