#!/usr/bin/env bash
# The CUDA figures of docs/gpu.md, on a machine set up with `setup.sh --gpu`
# (or `gpu/bundle.sh unpack`):
#
#   bash gpu/measure_cuda.sh OUTDIR [SECONDS]
#
# Five lanes side by side (compiling takes most of the time), each writing
# one log in OUTDIR, every line with the time it came:
#   check.log  gpu/check.py on device=cuda
#   tests.log  tests/test_gpu.py on CUDA
#   gpu-a.log  the papers' configuration: the beam search (beam 12) over
#              MEASURE_SENTENCES sentences (default 500), one at a time and
#              batched; training (baseline); a profile of its training step
#   gpu-b.log  the Multi30k model trained; the papers' configuration trained
#              (attentive residual)
#   cpu.log    the Multi30k model and the papers' first updates on the CPU:
#              the same seed gives the same parameters and batches, so the
#              costs printed per update compare with the GPU's
# MEASURE_LANES="gpu-a gpu-b" runs those lanes alone.  The steps of a lane
# run one after the other until SECONDS (default 1800) have passed; the one
# running then is stopped, and its log says where.
set -uo pipefail
cd "$(dirname "$0")/.."   # the project root
[ $# -ge 1 ] || { echo "usage: bash gpu/measure_cuda.sh OUTDIR [SECONDS]" >&2; exit 2; }
out=$1 budget=${2:-1800} sentences=${MEASURE_SENTENCES:-500}
lanes=${MEASURE_LANES:-check tests gpu-a gpu-b cpu}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# five lanes on one machine: two BLAS threads each (numpy's own OpenBLAS
# too, which --threads does not reach: the initial SVDs)
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2} OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
py=.venv/bin/python
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

# run LOG DEVICE ARGS...: `python ARGS` on DEVICE (cuda or cpu, each with a
# compile folder of its own, so that the lanes never wait for each other's
# compile lock) for at most what is left of the budget, its output appended
# to LOG
run() {
    local log=$1 device=$2 limit
    shift 2
    limit=$(( budget - ($(date +%s) - start) - 5 ))
    if [ "$limit" -le 10 ]; then
        echo "== skipped for want of time: $*" >> "$log"
        return 0
    fi
    echo "== $(date -u +%H:%M:%S) (limit ${limit} s): $*" >> "$log"
    THEANO_FLAGS="device=$device,base_compiledir=$HOME/.theano-measure-$device-$lane" \
        timeout -s INT -k 10 "$limit" $py "$@" 2>&1 | stamped >> "$log"
    echo "== exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" >> "$log"
}

checks() {
    local lane=check
    run "$out/check.log" cuda gpu/check.py --seed 1
}

gpu_tests() {
    local lane=tests
    run "$out/tests.log" cpu -m pytest -q -n 0 -p no:cacheprovider tests/test_gpu.py -k cuda
}

gpu_timings() {  # LANE: two lanes share the GPU (their logs show when each timed)
    local log=$out/gpu-$1.log lane=$1
    { nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } \
        >> "$log" 2>&1
    if [ "$lane" = a ]; then
        run "$log" cuda speed/benchmark.py translate --config paper --decoder baseline \
            --sentences "$sentences" --threads 2
        run "$log" cuda speed/benchmark.py train --config paper --decoder baseline \
            --updates 50 --threads 2
        run "$log" cuda speed/benchmark.py train --config paper --decoder baseline \
            --updates 5 --threads 2 --profile
    else
        run "$log" cuda speed/benchmark.py train --config multi30k --decoder baseline \
            --updates 200 --threads 2
        run "$log" cuda speed/benchmark.py train --config paper --decoder attentive \
            --updates 30 --threads 2
    fi
}

cpu_reference() {
    local log=$out/cpu.log lane=cpu
    { lscpu | head -20; g++ --version | head -1; } >> "$log" 2>&1
    run "$log" cpu speed/benchmark.py train --config multi30k --decoder baseline \
        --updates 200 --threads 2
    run "$log" cpu speed/benchmark.py train --config paper --decoder baseline --updates 3 \
        --threads 2
}

for lane in $lanes; do
    case $lane in
        check) checks & ;;
        tests) gpu_tests & ;;
        gpu-a) gpu_timings a & ;;
        gpu-b) gpu_timings b & ;;
        cpu) cpu_reference & ;;
        *) echo "measure_cuda.sh: unknown lane $lane (MEASURE_LANES)" >&2; exit 2 ;;
    esac
done
wait
echo "measure_cuda.sh: logs in $out after $(( $(date +%s) - start )) s"
