#!/bin/bash
# The accelerator figures of tools/bench_train.md in one call of a lent GPU machine, which has jax, flax, optax
# and orbax but no TensorFlow (bench imports none of the data stack):
#   tools/bench_gpu.sh OUT_DIR [--config.KEY=VALUE ...]   (extra flags go to every bench, e.g. to shrink it)
# lm_1b in bfloat16 at L=2048 with each attention implementation that runs on a GPU, on one device (batch 8, one
# microbatch: the zoo config's 512 rows need its 8 devices), then the mixture-of-experts step against its dense
# counterpart at a GPU-sized shape, on a machine of two GPUs or more lm_1b pipelined over them (a stage per GPU)
# against the same GPUs on the data axis, then one profiled step of each. Each bench has a time limit, so one that
# hangs leaves the others their time.
set -u
out=${1:?usage: tools/bench_gpu.sh OUT_DIR [bench flags]}; shift
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$out/gpu.txt"
lm_1b=(--config=configs/lm_1b.py --config.model.dtype=bfloat16 --config.train.batch_size="${BATCH:-8}"
       --config.train.microbatches=1 --config.mesh.fsdp=1 --steps="${STEPS:-10}" --warmup=2 --no_save)
first_attention=${ATTENTION:-gpu_flash}; first_attention=${first_attention%% *}
for attention in ${ATTENTION:-gpu_flash xla}; do
  timeout "${LIMIT:-200}" python3 -m pretrain bench "${lm_1b[@]}" --config.model.attention="$attention" "$@" 2>&1 |
    tee "$out/lm_1b_$attention.log"
done
moe=(--config=quickstart_moe --compare=dense --config.model.dtype=bfloat16 --config.model.d_model=1024
     --config.model.num_layers=8 --config.model.num_heads=16 --config.model.num_kv_heads=16
     --config.model.head_dim=64 --config.model.moe_mlp_dim=1408 --config.data.seq_len=1024
     --config.train.batch_size=32 --steps="${STEPS:-10}" --warmup=2)
timeout "${LIMIT:-200}" python3 -m pretrain bench "${moe[@]}" "$@" 2>&1 | tee "$out/moe.log"
# The stage axis needs a device per stage: lm_1b's 22 layers in 2 stages, the data axis over the other GPUs, 4
# microbatches of 2 rows per data-parallel pipeline, against the unsplit step (all GPUs on the data axis).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -ge 2 ] && [ $((gpus % 2)) = 0 ]; then
  timeout "${LIMIT:-200}" python3 -m pretrain bench "${lm_1b[@]}" --config.model.attention="$first_attention" \
    --config.mesh.stage=2 --config.train.batch_size=$((4 * gpus)) --config.train.microbatches=4 --compare=unsplit \
    "$@" 2>&1 | tee "$out/lm_1b_pipelined.log"
else
  echo "pipelined row: skipped, $gpus GPU here (2 stages need an even count)" | tee "$out/lm_1b_pipelined.log"
fi
# Where the step's time goes (issue: profile first): one profiled step of lm_1b with the first attention and of the
# MoE against dense, after the timings, so a slow profile cannot cost them their figures. PROFILE=0 skips it.
if [ "${PROFILE:-1}" = 1 ]; then
  timeout "${LIMIT:-200}" python3 -m pretrain bench "${lm_1b[@]}" --config.model.attention="$first_attention" \
    --steps=2 --warmup=1 --profile "$@" 2>&1 | tee "$out/lm_1b_profile.log"
  timeout "${LIMIT:-200}" python3 -m pretrain bench "${moe[@]}" --steps=2 --warmup=1 --profile "$@" 2>&1 |
    tee "$out/moe_profile.log"
fi
