#!/usr/bin/env bash
# The GPU paths of tfrepro, checked on a machine with an NVIDIA GPU, in one
# command (under 8 minutes): one trial per GPU, --replicas 2 on one GPU, the
# NVML sampling, memory growth, and the examples' mixed-precision NaN and XLA
# crash. Prints a table of what held. Every project is a copy in a temp dir.
#
#   benchmarks/gpu_check.sh              run the checks (needs nvidia-smi and a GPU)
#   benchmarks/gpu_check.sh --dry-run    list what it would check, run nothing
#
# TFREPRO (default: `python -m tfrepro` with $PYTHON, default python3) is the
# command under test. Exit code: 0 every check held, 1 one did not, 2 no GPU.
set -u

CHECKS=(
  "gpus|one trial per GPU: CUDA_VISIBLE_DEVICES=i, the trial sees that GPU and records its memory peak"
  "replicas|--replicas 2 on one GPU: MirroredStrategy sees 2 logical GPUs (2 replicas in sync)"
  "nvml|NVML sampling: a trial records GPU utilisation samples (extra.nvml, needs tfrepro[gpu])"
  "memory_growth|memory growth: the examples' memory_growth feature on a real GPU runs clean"
  "mixed_precision|mixed precision: the demo's NaN under mixed_float16 is found (culprit mixed_precision)"
  "xla|XLA: the interaction example's crash under jit_compile=True is found (robust_clip + xla)"
)

if [[ "${1:-}" == "--dry-run" ]]; then
  echo "gpu_check: would check (on a machine with an NVIDIA GPU, under 8 minutes):"
  for c in "${CHECKS[@]}"; do printf '  %-16s %s\n' "${c%%|*}" "${c#*|}"; done
  exit 0
fi

PYTHON=${PYTHON:-python3}
read -r -a TFREPRO <<<"${TFREPRO:-$PYTHON -m tfrepro}"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi -L failed); try --dry-run" >&2
  exit 2
fi
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
WORK=$(mktemp -d -t tfrepro-gpucheck-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
EXAMPLES=$("$PYTHON" -c 'import os, tfrepro; print(os.path.join(os.path.dirname(tfrepro.__file__), "examples"))')
declare -A HELD DETAIL

record() { HELD[$1]=$2; DETAIL[$1]=$3; echo "gpu_check: $1: $2 ($3)" >&2; }
field() { "$PYTHON" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@" 2>/dev/null; }
copy() { cp -r "$EXAMPLES/$1" "$WORK/$2" && echo "$WORK/$2"; }

# 1. one trial per GPU, all at once (timeouts below keep the whole under 8 minutes)
ok=yes; detail=""
for ((i = 0; i < NGPU; i++)); do
  p=$(copy healthy "gpu$i")
  CUDA_VISIBLE_DEVICES=$i timeout 90 "${TFREPRO[@]}" run "$p" --none --steps 10 --json >"$WORK/gpu$i.json" 2>"$WORK/gpu$i.err" &
done
wait
for ((i = 0; i < NGPU; i++)); do
  gpu=$(field "$WORK/gpu$i.json" "any('GPU' in x for x in d.get('devices') or [])")
  peak=$(field "$WORK/gpu$i.json" "d.get('device_peak_bytes')")
  [[ "$gpu" == True && "$peak" != None && -n "$peak" ]] || ok=no
  detail+="GPU $i: devices GPU=$gpu peak=$peak; "
done
record gpus "$ok" "$detail"

# 2. --replicas 2 on one GPU (a MirroredStrategy custom loop)
p="$WORK/replicas"; mkdir -p "$p"
cat >"$p/repro.py" <<'EOF'
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
print("replicas", strategy.num_replicas_in_sync)
with strategy.scope():
    w = tf.Variable(1.0)
for step in range(1, 6):
    loss = strategy.run(lambda: w * 2.0)
    print(f"step={step} loss={float(strategy.reduce('SUM', loss, axis=None))}")
EOF
CUDA_VISIBLE_DEVICES=0 timeout 90 "${TFREPRO[@]}" run "$p" --replicas 2 --json >"$WORK/rep.json" 2>"$WORK/rep.err"
n=$(field "$WORK/rep.json" "d.get('replicas_in_sync')")
devs=$(field "$WORK/rep.json" "sum('GPU' in x for x in d.get('devices') or [])")
[[ "$n" == 2 && "$devs" == 2 ]] && ok=yes || ok=no
record replicas "$ok" "replicas_in_sync=$n, logical GPUs used=$devs"

# 3. NVML sampling (tfrepro[gpu]: nvidia-ml-py)
if "$PYTHON" -c 'import pynvml' 2>/dev/null; then
  samples=$(field "$WORK/gpu0.json" "len((d.get('extra') or {}).get('nvml', {}).get('gpu_util') or [])")
  [[ -n "$samples" && "$samples" != 0 ]] && ok=yes || ok=no
  record nvml "$ok" "$samples utilisation samples in the GPU 0 trial"
else
  record nvml no "pynvml not installed: pip install 'tfrepro[gpu]'"
fi

# 4. memory growth (healthy's memory_growth feature on, every feature on)
p=$(copy healthy growth)
CUDA_VISIBLE_DEVICES=0 timeout 60 "${TFREPRO[@]}" run "$p" --all --steps 10 --json >"$WORK/growth.json" 2>"$WORK/growth.err"
crashed=$(field "$WORK/growth.json" "d.get('crashed')")
steps=$(field "$WORK/growth.json" "d.get('steps_run')")
[[ "$crashed" == False && "$steps" == 10 ]] && ok=yes || ok=no
record memory_growth "$ok" "crashed=$crashed steps=$steps"

# 5. the mixed-precision NaN (demo) and 6. the XLA crash (interaction)
for pair in "mixed_precision demo nan mixed_precision" "xla interaction crash robust_clip,xla"; do
  read -r name example symptom culprits <<<"$pair"
  p=$(copy "$example" "$name")
  CUDA_VISIBLE_DEVICES=0 timeout 120 "${TFREPRO[@]}" bisect "$p" --json >"$WORK/$name.json" 2>"$WORK/$name.err"
  got=$(field "$WORK/$name.json" "d['status'] + ' ' + str(d.get('symptom')) + ' ' + ','.join(d.get('culprits') or [])")
  [[ "$got" == "found $symptom $culprits" ]] && ok=yes || ok=no
  record "$name" "$ok" "got: ${got:-no answer}; expected: found $symptom $culprits"
done

echo
printf '%-16s %-5s %s\n' check held detail
all=0
for c in "${CHECKS[@]}"; do
  k=${c%%|*}
  printf '%-16s %-5s %s\n' "$k" "${HELD[$k]:-no}" "${DETAIL[$k]:-not run}"
  [[ "${HELD[$k]:-no}" == yes ]] || all=1
done
exit $all
