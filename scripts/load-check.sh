#!/usr/bin/env bash
# A verdict does not depend on the machine's load (docs/performance.md#time-limit-and-load).
#
# With an empty kernel cache, two `lossproof check` runs in parallel, beside 2 busy processes
# per core: both must exit 0, and no compiler of the kernel may be left running afterwards.
#
#   scripts/load-check.sh                              # the full check of the built-in backends
#   scripts/load-check.sh --objective 'distill.*'      # any `lossproof check` options
#   LOSSPROOF="python -m lossproof" scripts/load-check.sh ...   # a source checkout
# (PYTHON: the interpreter that runs lossproof, default python: it names the kernel's source.)
#
# Prints each run's time, exit status and summary; exits 0 when both runs exit 0 and no
# compiler is left, 1 otherwise.
set -u

LOSSPROOF=${LOSSPROOF:-lossproof}
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)
work=$(mktemp -d)
export LOSSPROOF_CACHE="$work/cache"   # empty: the first run builds the compiled kernel
load=()
runs=()
status=0

stop_load() {
    for pid in "${load[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${load[@]}"; do wait "$pid" 2>/dev/null; done
    load=()
}
finish() {
    stop_load
    for pid in "${runs[@]}"; do pkill -TERM -P "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; done
    rm -rf "$LOSSPROOF_CACHE"
    if [ "$status" = 0 ]; then rm -rf "$work"; else echo "logs: $work"; fi
}
trap finish EXIT
trap 'status=130; exit 130' INT TERM

# The compiler processes of this kernel (the c++ driver, cc1plus, the linker): their command
# lines name its source or this run's cache; other compilers on a shared machine are not counted.
source=$(${PYTHON:-python} -c 'from lossproof.refimpl.torch import _compiled; print(_compiled.SOURCE)') || exit 1
compilers() {
    ps -eo pid=,ppid=,etime=,args= | grep -F -e "$source" -e "$LOSSPROOF_CACHE" | grep -v -e grep -e load-check
}

for _ in $(seq $((2 * cores))); do
    sh -c 'while :; do :; done' &
    load+=($!)
done
echo "load: ${#load[@]} busy processes on $cores cores; kernel cache $LOSSPROOF_CACHE (empty)"

start=$(date +%s)
for run in 1 2; do
    ( t0=$(date +%s)
      $LOSSPROOF check --quiet "$@" >"$work/run$run.log" 2>&1
      echo "$? $(( $(date +%s) - t0 ))" >"$work/run$run.status" ) &
    runs+=($!)
done
wait "${runs[@]}"
stop_load
runs=()
echo "both runs done in $(( $(date +%s) - start )) s; load stopped"

for run in 1 2; do
    read -r code seconds <"$work/run$run.status"
    echo "run $run: exit $code after $seconds s"
    grep -E "^(conformance|validation):" "$work/run$run.log" | sed 's/^/  /'
    if [ "$code" != 0 ]; then
        status=1
        tail -n 30 "$work/run$run.log" | sed 's/^/  | /'
    fi
done

sleep 1   # a killed compiler's children are reaped by init
left=$(compilers)
if [ -n "$left" ]; then
    echo "compiler processes left running:"
    echo "$left" | sed 's/^/  /'
    status=1
else
    echo "compiler processes left running: 0"
fi
exit $status
