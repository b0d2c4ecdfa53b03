#!/usr/bin/env bash
# Nightly GPU run: conformance suite (nightly profile, Triton on CUDA, workers pinned to every
# GPU), the CUDA-graph property and its mutant, the filter cut's kernel tests on CUDA
# (tests/test_triton_filters.py, test_triton_lazy_cut.py, test_triton_one_launch*.py, test_filter_probe.py,
# test_triton_slow_path.py, test_triton_copies.py, test_triton_sample_counts.py, test_triton_rank.py),
# compute-sanitizer (memcheck, initcheck, racecheck; on two or more GPUs side by side, each tool and the driver
# in one part per GPU), the GPU benchmark (quick mode), each statistical case's sampling rate alone, FlashInfer's
# chain sampler through its adapter when FlashInfer is importable, and a report with plots.
#
#   ci/nightly_gpu.sh [RESULTS_DIR]          # default: $RESULTS, else results/nightly-YYYYMMDD
#
# Needs: CUDA GPUs, python with torch, triton, pytest, pytest-xdist, hypothesis and scipy already
# installed (matplotlib optional: without it the report has no pictures). No network: the project is
# installed from the checkout with --no-deps --no-build-isolation --no-index, or used through
# PYTHONPATH with the pytest plugin loaded by -p if that install is impossible.
# GPUs: those of $CUDA_VISIBLE_DEVICES where it is set, else every GPU `nvidia-smi -L` lists
# (CUDA_VISIBLE_DEVICES=0 runs the nightly on one GPU of a larger host, as its scaling table does).
# Environment: PYTHON (default python3), WORKERS_PER_GPU (default 1), FILTER_WORKERS (default: the cores, at least
# four a GPU), BENCH_ARGS (default --quick),
# SUITE_RUNNER (pool, the default: `specverify check`'s worker pool, which draws each production-vocabulary case in
# one part per GPU; pytest: the shipped suite under pytest-xdist, one worker per GPU, each case drawn whole),
# SKIP_SANITIZER=1 to skip compute-sanitizer, SPECVERIFY_COMMIT to name the commit when the checkout has
# no .git.
# STEPS="driver suite ...": run only the steps named (the names of steps.tsv, listed in ALL_STEPS below); the
# others are recorded as "not run (STEPS)", and the last line says the run was partial. DEADLINE=SECONDS: the
# most seconds from the script's start that its steps may run; a step still running then is stopped and failed,
# and the steps after it are failed as "not run (DEADLINE)", so that a machine's per-command limit ends the run
# with every result it reached and a report (the report runs after DEADLINE too: it takes seconds). Together they spread the nightly over several calls of a lent machine.
# Exit status 0 only when every step run passed and none was cut by DEADLINE.
set -uo pipefail

ALL_STEPS="driver suite mutants filter-kernels sanitizer-memcheck sanitizer-initcheck sanitizer-racecheck bench rates
flashinfer report"
SELECTED="$(echo ${STEPS:-$ALL_STEPS} | tr ',' ' ')"
for s in $SELECTED; do
  case " $(echo $ALL_STEPS) " in *" $s "*) ;; *)
    echo "nightly_gpu.sh: STEPS names an unknown step '$s'; the steps are: $(echo $ALL_STEPS)" >&2; exit 2 ;;
  esac
done
case "${DEADLINE:-0}" in ''|*[!0-9]*)
  echo "nightly_gpu.sh: DEADLINE must be a whole number of seconds, not '${DEADLINE}'" >&2; exit 2 ;;
esac

SUITE_RUNNER="${SUITE_RUNNER:-pool}"
case "$SUITE_RUNNER" in pool|pytest) ;; *)
  echo "nightly_gpu.sh: SUITE_RUNNER must be pool or pytest, not '$SUITE_RUNNER'" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RESULTS="${1:-${RESULTS:-results/nightly-$(date +%Y%m%d)}}"
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
STEPS_TSV="$RESULTS/steps.tsv"
printf 'step\tstatus\tseconds\n' > "$STEPS_TSV"
START=$(date +%s)
FAILED=0

NOT_RUN=""
selected() { case " $SELECTED " in *" $1 "*) return 0 ;; esac; return 1; }
step() {  # step NAME LOGFILE COMMAND...: run, log, record status and time (unless STEPS or DEADLINE leave it out)
  local name="$1" log="$2"; shift 2
  if ! selected "$name"; then
    printf '%s\t%s\t%s\n' "$name" "not run (STEPS)" "-" >> "$STEPS_TSV"; NOT_RUN="$NOT_RUN $name"; return 0
  fi
  local limit=()
  if [ "${DEADLINE:-0}" -gt 0 ] && [ "$name" != report ]; then
    local left=$(( DEADLINE - ($(date +%s) - START) ))
    if [ $left -le 0 ]; then
      printf '%s\t%s\t%s\n' "$name" "fail(not run (DEADLINE))" "-" >> "$STEPS_TSV"; FAILED=1
      echo "=== $name: not run, DEADLINE=$DEADLINE s reached" | tee -a "$RESULTS/nightly.log"; return 1
    fi
    limit=(timeout "$left")
  fi
  local t0=$(date +%s)
  echo "=== $name: $*" | tee -a "$RESULTS/nightly.log"
  "${limit[@]}" "$@" > "$RESULTS/$log" 2>&1
  local rc=$?
  local dt=$(( $(date +%s) - t0 ))
  local status=pass; [ $rc -eq 0 ] || { status="fail(rc=$rc)"; FAILED=1; }
  [ $rc -eq 124 ] && [ ${#limit[@]} -gt 0 ] && status="fail(stopped at DEADLINE=$DEADLINE s)"
  printf '%s\t%s\t%s\n' "$name" "$status" "$dt" >> "$STEPS_TSV"
  echo "=== $name: $status in ${dt}s (log: $log)" | tee -a "$RESULTS/nightly.log"
  return $rc
}

# ---- environment and install (no downloads) --------------------------------------------------
{
  date -u +%FT%TZ; hostname; nvidia-smi -L || true
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$PY" -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda)'
  command -v compute-sanitizer && compute-sanitizer --version | tail -1
  "$PY" -c 'import matplotlib; print("matplotlib", matplotlib.__version__)' 2>/dev/null || echo "matplotlib: not installed (report without pictures)"
  # A copied checkout may carry no .git, or a stale one: the caller can name the commit; the reports' own rule
  # (specverify.report.source_commit) appends -dirty where tracked files differ from HEAD
  echo "commit ${SPECVERIFY_COMMIT:-$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1])
from specverify.report import source_commit; print(source_commit(sys.argv[1]) or "unknown")' "$ROOT" 2>/dev/null \
    || echo unknown)}"
} > "$RESULTS/env.txt" 2>&1
"$PY" -m pip install --no-deps --no-build-isolation --no-index -q -e "$ROOT" > "$RESULTS/install.log" 2>&1 \
  || echo "pip install -e failed (see install.log): using PYTHONPATH" | tee -a "$RESULTS/nightly.log"
# Empty where the pytest11 entry point is installed, else "-p specverify.plugin".
read -r -a PLUGIN <<< "$("$PY" -c 'from specverify.plugin import load_args; print(*load_args())')"
if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
  NGPU=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c '[^[:space:]]' || true)
else
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  [ "${NGPU:-0}" -ge 1 ] || NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
fi
[ "${NGPU:-0}" -ge 1 ] || { echo "no CUDA GPU found" | tee -a "$RESULTS/nightly.log"; exit 2; }
WORKERS=$(( NGPU * ${WORKERS_PER_GPU:-1} ))
echo "GPUs: $NGPU, suite workers: $WORKERS ($SUITE_RUNNER), plugin args: ${PLUGIN[*]:-(entry point)}" \
  | tee -a "$RESULTS/nightly.log"

# ---- 1. sanitizer driver without the sanitizer: correctness, and warms Triton's cache ----------
# (on two or more GPUs in one part per GPU, side by side: every N-th work item each)
PARTS=(); [ "$NGPU" -ge 2 ] && PARTS=(--parts "$NGPU")
step driver driver.log "$PY" ci/sanitizer_driver.py "${PARTS[@]}"

# ---- 2. conformance suite, nightly profile, Triton on CUDA, workers pinned to every GPU -------------
# pool: a production-vocabulary case is drawn in one part per GPU and its counts summed, so that a second GPU
# shortens the step's longest checks; pytest (loadgroup: a statistical case's checks run in one worker, which
# draws the case once for them all) draws each case whole in one worker
if [ "$SUITE_RUNNER" = pool ]; then
  step suite suite.log "$PY" -m specverify.cli check triton --profile nightly --device cuda -n "$WORKERS" \
    --gpus auto --json "$RESULTS/suite.json" --junit "$RESULTS/suite.xml" --failures-dir "$RESULTS/failures"
else
  step suite suite.log "$PY" -m pytest "${PLUGIN[@]}" --pyargs specverify.suite -p no:cacheprovider \
    --specverify-backend=triton --specverify-profile=nightly -n "$WORKERS" --dist loadgroup --specverify-gpus=auto \
    --specverify-json="$RESULTS/suite.json" --junitxml="$RESULTS/suite.xml" -q -rA --durations=15
fi

# ---- 3. the GPU-only mutants (the CUDA-graph one) are caught, the Triton control passes ---------
step mutants mutants.log "$PY" -m pytest "${PLUGIN[@]}" tests/test_mutants_caught.py -p no:cacheprovider \
  -k requires -q -rA

# ---- 3a. the filter cut's kernel tests on CUDA: its sample bracket, slow path and record's copies (their test
# kernels), PRE plan, lazy cut, one launch, and the one launch's phase stamps. The run is bound by compiling the cut's
# kernels, one process a CPU core: a worker a core, at least four a GPU, pinned to the GPUs by the plugin
# (FILTER_WORKERS=N to choose)
NCPU=$(nproc 2>/dev/null || echo 1)
FILTER_WORKERS=${FILTER_WORKERS:-$(( NCPU > 4 * NGPU ? NCPU : 4 * NGPU ))}
step filter-kernels filter-kernels.log "$PY" -m pytest "${PLUGIN[@]}" tests/test_triton_filters.py \
  tests/test_triton_lazy_cut.py tests/test_triton_one_launch*.py tests/test_filter_probe.py \
  tests/test_triton_slow_path.py tests/test_triton_copies.py tests/test_triton_sample_counts.py \
  tests/test_triton_rank.py -p no:cacheprovider -n "$FILTER_WORKERS" --specverify-gpus=auto -v -rA

# ---- 4. compute-sanitizer over the driver --------------------------------------------------------
# With two or more GPUs the three tools run side by side, each over the driver's parts (one per GPU, each part
# under its own sanitizer process); each step is recorded as it ends. With one GPU they run one after another.
sanitize() {  # sanitize TOOL: the driver under compute-sanitizer's TOOL
  local wrap=(compute-sanitizer --tool "$1" --error-exitcode 99 --print-limit 50)
  if [ "$NGPU" -ge 2 ]; then
    step "sanitizer-$1" "sanitizer-$1.log" "$PY" ci/sanitizer_driver.py --parts "$NGPU" --wrap "${wrap[*]}"
  else
    step "sanitizer-$1" "sanitizer-$1.log" "${wrap[@]}" "$PY" ci/sanitizer_driver.py
  fi
}
if [ "${SKIP_SANITIZER:-0}" != 1 ] && [ "$NGPU" -ge 2 ]; then
  PIDS=()
  for tool in racecheck memcheck initcheck; do
    if ! selected "sanitizer-$tool"; then sanitize "$tool"; continue; fi   # recorded as not run, here
    sanitize "$tool" &
    PIDS+=($!)
  done
  for pid in "${PIDS[@]}"; do wait "$pid" || FAILED=1; done
elif [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  for tool in memcheck initcheck racecheck; do
    sanitize "$tool"
  done
else
  for tool in memcheck initcheck racecheck; do
    printf 'sanitizer-%s\tnot run (SKIP_SANITIZER)\t-\n' $tool >> "$STEPS_TSV"; NOT_RUN="$NOT_RUN sanitizer-$tool"
  done
fi

# ---- 5. benchmark ---------------------------------------------------------------------------------
# shellcheck disable=SC2086
step bench bench.log "$PY" ci/bench_gpu.py ${BENCH_ARGS:---quick} --json "$RESULTS/bench.json" \
  --markdown "$RESULTS/bench.md"

# ---- 5a. each statistical case's draw alone, warm: the suite's rates are shared between its workers ----
step rates rates.log "$PY" ci/sampling_rates.py --json "$RESULTS/rates.json" --markdown "$RESULTS/rates.md"

# ---- 5b. third-party kernels, when importable (docs/kernels.md records each) ----------------------
if ! selected flashinfer || "$PY" -c 'import flashinfer.sampling' > /dev/null 2>&1; then
  step flashinfer flashinfer.log "$PY" -m specverify.cli check specverify.adapters.flashinfer:chain \
    --profile nightly --device cuda --json "$RESULTS/flashinfer.json"
else
  echo "=== flashinfer: not importable here, not checked" | tee -a "$RESULTS/nightly.log"
  # named in STEPS, a step that cannot run fails; in the default run it is only noted
  if [ -n "${STEPS:-}" ]; then status="fail(not importable)"; FAILED=1; else status="not run (not importable)"; fi
  printf '%s\t%s\t%s\n' flashinfer "$status" "-" >> "$STEPS_TSV"
fi

# ---- 6. report --------------------------------------------------------------------------------------
ELAPSED=$(( $(date +%s) - START ))
step report report.log "$PY" ci/nightly_report.py "$RESULTS" --elapsed "$ELAPSED"
TOTAL=$(( $(date +%s) - START ))
VERDICT=$([ $FAILED -eq 0 ] && echo PASSED || echo FAILED)
echo "nightly: $VERDICT in ${TOTAL}s${NOT_RUN:+ (partial, not run:$NOT_RUN)}; results in $RESULTS" \
  | tee -a "$RESULTS/nightly.log"
# one file to carry off a lent machine whose tools return a limited number of files
tar -czf "$RESULTS.tar.gz" -C "$(dirname "$RESULTS")" "$(basename "$RESULTS")" \
  && echo "nightly: the folder as one file: $RESULTS.tar.gz"
exit $FAILED
