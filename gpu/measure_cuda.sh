#!/usr/bin/env bash
# The GPU figures of docs/gpu.md in one time-limited command, on a machine
# set up with `setup.sh --gpu` (or `gpu/bundle.sh unpack`):
#
#   bash gpu/measure_cuda.sh OUTDIR [SECONDS]
#   MEASURE_DEVICE=opencl0:0 bash gpu/measure_cuda.sh OUTDIR SECONDS   # rehearsal
#
# Two steps, each log line stamped with the time it came:
#  1. papers.log, alone on the machine (Theano's compile pool and the BLAS
#     threads on every core): the papers' size (speed/benchmark.py --config
#     paper: dim_word 500, dim 1024, 50,000 words, batch 80, maxlen 50,
#     Adadelta, clip 1) trained on the device, the baseline then the
#     attentive residual decoder, MEASURE_UPDATES timed updates each
#     (default 100): the time from the start to the first update, words/s,
#     GPU memory.  The baseline ends by half of step 1's time, the attentive
#     decoder by SECONDS minus MEASURE_RESERVE (default 150), which step 2
#     keeps.
#  2. side by side, the cores shared (MEASURE_LANES, default "cpu profile
#     translate check"; "tests" adds tests/test_gpu.py on the device):
#       cpu.log        the first updates of both decoders on the CPU (the same
#                      seed: the same parameters and batches, so the costs
#                      compare with papers.log's), then the CPU's beam search
#       profile.log    the profile of the baseline's training step (MEASURE_
#                      UPDATES updates, at most 5): the ten
#                      most expensive ops, the GPU op calls an update, the
#                      Python thread's CPU time an update
#       translate.log  the papers' size beam search on the device, one sentence
#                      at a time and batched, over MEASURE_SENTENCES (default 64)
#       check.log      gpu/check.py;  tests.log  tests/test_gpu.py
# Each run stops when SECONDS (default 1800) have passed since the start;
# its log says where.  usage.csv: the GPU's use and memory every half
# second (CUDA, where nvidia-smi is).  Compile folders: MEASURE_CACHE
# (default ~/.cache/nmt-measure), one for the papers' runs, the profile and
# the search (the same modules: compiled once), one for the checks, one for
# the CPU.  MEASURE_PYTHON: the interpreter (default .venv/bin/python).
set -uo pipefail
cd "$(dirname "$0")/.."   # the project root
[ $# -ge 1 ] || { echo "usage: bash gpu/measure_cuda.sh OUTDIR [SECONDS]" >&2; exit 2; }
out=$1 budget=${2:-1800}
device=${MEASURE_DEVICE:-cuda} updates=${MEASURE_UPDATES:-100}
sentences=${MEASURE_SENTENCES:-64} reserve=${MEASURE_RESERVE:-150}
lanes=${MEASURE_LANES:-cpu profile translate check}
cache=${MEASURE_CACHE:-$HOME/.cache/nmt-measure}
kind=${device%%[0-9:]*}    # cuda, opencl
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)   # not what OMP_* says
for n in "$budget" "$updates" "$sentences" "$reserve"; do
    [[ $n =~ ^[0-9]+$ ]] || { echo "error: measure_cuda.sh: not a whole number: $n (SECONDS or MEASURE_*)" >&2; exit 2; }
done
for name in $lanes; do
    case $name in cpu|profile|translate|check|tests) ;;
        *) echo "error: measure_cuda.sh: unknown lane $name (MEASURE_LANES)" >&2; exit 2 ;;
    esac
done
mkdir -p "$out" "$cache"
export PYTHONUNBUFFERED=1
py=${MEASURE_PYTHON:-.venv/bin/python}
start=$(date +%s)

stamped() {  # each line with the time it came (the lanes' logs side by side),
    # files named relative to the repository or ~ (a log names no folder of
    # the machine: tests/test_docs.py)
    local line
    while IFS= read -r line; do
        line=${line//"$PWD/"/}
        line=${line//"$HOME/"/"~/"}
        printf '%(%H:%M:%S)T %s\n' -1 "$line"
    done
}

# run LOG DEVICE FOLDER THREADS KEEP ARGS...: `python ARGS` on DEVICE with
# the compile folder FOLDER, THREADS BLAS threads and g++ processes, until
# KEEP seconds before the end of the budget; its output appended to LOG
run() {
    local log=$1 dev=$2 folder=$3 threads=$4 keep=$5 limit
    shift 5
    limit=$(( budget - keep - ($(date +%s) - start) - 5 ))
    if [ "$limit" -le 10 ]; then
        echo "== skipped for want of time: $*" >> "$log"
        return 0
    fi
    echo "== $(date -u +%H:%M:%S) (limit ${limit} s, ${threads} threads, $(( $(date +%s) - start )) s after the start): $*" >> "$log"
    THEANO_FLAGS="device=$dev,base_compiledir=$cache/theano-$folder" \
        NMT_COMPILE_JOBS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
        timeout -s INT -k 10 "$limit" $py "$@" 2>&1 | stamped >> "$log"
    echo "== exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" >> "$log"
}

machine() {
    { lscpu | head -20; g++ --version | head -1; nproc; free -g
      if command -v nvidia-smi > /dev/null; then
          nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
      fi; } 2>&1
}

papers() {   # step 1: alone, every core; the baseline may take half of its time
    local decoder keep
    machine >> "$out/papers.log"
    for decoder in baseline attentive; do
        keep=$reserve
        [ "$decoder" = attentive ] \
            || keep=$(( reserve + (budget - reserve - ($(date +%s) - start)) / 2 ))
        run "$out/papers.log" "$device" gpu "$cores" "$keep" speed/benchmark.py train \
            --config paper --decoder "$decoder" --updates "$updates" --threads "$cores"
    done
}

lane() {   # LANE THREADS: a lane of step 2
    local t=$2
    case $1 in
        cpu)
            for decoder in baseline attentive; do
                run "$out/cpu.log" cpu cpu "$t" 0 speed/benchmark.py train --config paper \
                    --decoder "$decoder" --updates 1 --threads "$t"
            done
            run "$out/cpu.log" cpu cpu "$t" 0 speed/benchmark.py translate --config paper \
                --decoder baseline --sentences 16 --threads "$t" ;;
        profile)
            run "$out/profile.log" "$device" gpu "$t" 0 speed/benchmark.py train \
                --config paper --decoder baseline --updates $(( updates < 5 ? updates : 5 )) \
                --threads "$t" --profile ;;
        translate)
            run "$out/translate.log" "$device" gpu "$t" 0 speed/benchmark.py translate \
                --config paper --decoder baseline --sentences "$sentences" --threads "$t" ;;
        check)
            run "$out/check.log" "$device" checks "$t" 0 gpu/check.py ;;
        tests)
            run "$out/tests.log" cpu checks "$t" 0 -m pytest -q -n 0 -p no:cacheprovider \
                tests/test_gpu.py -k "$kind" ;;
    esac
}

if command -v nvidia-smi > /dev/null && [ "$kind" = cuda ]; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 500 \
        > "$out/usage.csv" 2>&1 &
    sampler=$!
fi
papers
set -- $lanes
share=$(( $# && cores / $# > 0 ? cores / $# : 1 ))
pids=()
for name in $lanes; do
    lane "$name" "$share" &
    pids+=($!)
done
wait "${pids[@]}"
[ -z "${sampler:-}" ] || kill "$sampler"
echo "measure_cuda.sh: logs in $out after $(( $(date +%s) - start )) s"
