#!/usr/bin/env bash
# The first-GPU-node script: one lease, every check that needs a GPU, each step under
# a time cap so the whole fits 15 minutes of device time with the transfers. docs/gpu.md says
# what each step shows; results go under $OUT (the device tool brings that folder back), one
# folder per step, and a summary (summary.md) of every table.
#
# Here, on a machine with PyPI, once:
#   bash scripts/gpu-node.sh prepare        # the bundle for the node's image, in parts that fit
# It prints the device calls to make, in order, each one's carry list. On the node, per call:
#   bash scripts/gpu-node.sh receive N      # calls 1..P-1: a part arrives; its sha256 checked
#   bash scripts/gpu-node.sh measure install startup traced   # the last part's call
#   bash scripts/gpu-node.sh measure mfu                      # one more call (inductor's
#                                                             # cold compile takes minutes)
# Each call must follow the one before within the machine's idle release (30 s): make them
# back to back. A step that fails or hits its cap is noted and the next one runs.
#
# Steps of `measure`, in order, with caps (seconds):
#   install   100  the bundle into a venv (docs/offline-bundle.md)
#   startup   200  selftest's launcher checks: one rank and two ranks sharing the GPU, with
#                  launcher fork and actors; start-up per run by launcher
#   traced    150  one traced DDP step with two ranks sharing the GPU and one traced one-rank
#                  step; do the gpu_user_annotation ProfilerStep spans exist, how long are they
#                  (scripts/trace_spans.py); the ranks' clock offsets, exposed = waited +
#                  transfer and the straggler verdict (one machine, one clock)
#   mfu       240  the modern sweep file's one-rank run (bf16, fused AdamW, compiled, inductor):
#                  MFU, with compile and start-up phases
# Rehearsed here on CPU (no bundle, this checkout's venv, a tiny model; two ranks on CPU share
# no GPU, so SHARE is empty):
#   VENV=.venv OUT=/tmp/gpu-rehearsal SHARE= EXTRA_SETS="--set model=gpt2-tiny --set seq_len=64
#   --set micro_batch_size=2" bash scripts/gpu-node.sh measure traced mfu
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=bundle
PART_MIB=${PART_MIB:-56}   # + the working tree (~4 MiB) < 64 MiB per call
HAVE=${HAVE:-docs/measurements/2026-11-27-first-gpu-h200/image-pip-list.txt}
VENV=${VENV:-$REPO/.gpu-venv}  # in the checkout: kept on the node between calls (ignored)
OUT=${OUT:-$REPO/out}
MODERN=sweeps/h100-2gpu-gpt2-modern.yaml
CLASSIC=sweeps/titanrtx-2gpu-gpt2-classic.yaml
cd "$REPO"

step() {  # step NAME CAP_S COMMAND...: run under a cap, log to $OUT/NAME/log.txt, note the end
  local name=$1 cap=$2; shift 2
  mkdir -p "$OUT/$name"
  local t0=$SECONDS
  echo "== $name (cap ${cap}s): $*" | tee -a "$OUT/summary.md"
  timeout --kill-after=10 "$cap" "$@" >"$OUT/$name/log.txt" 2>&1
  local rc=$?
  echo "   $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/summary.md"
  tail -n 25 "$OUT/$name/log.txt"
  return 0
}

prepare() {
  .venv/bin/python scripts/bundle --python 3.12 --have-file "$HAVE" --out "$BUNDLE" \
    --part-mib "$PART_MIB" || exit 1
  local parts=("$BUNDLE"/linksweep-bundle.tar.*)
  local n=${#parts[@]} i=1
  echo "device calls, back to back (kind left out; timeout_s as shown):"
  for p in "${parts[@]}"; do
    if [ "$i" -lt "$n" ]; then
      echo "  $i. carry [\"$p\"$( [ "$i" = 1 ] && echo ", \"$BUNDLE/manifest.json\", \"$BUNDLE/install-bundle.sh\", \"$BUNDLE/install_bundle.py\"")]" \
        "command: bash scripts/gpu-node.sh receive $i   timeout_s 60"
    else
      echo "  $i. carry [\"$p\"] command: bash scripts/gpu-node.sh measure install startup traced   timeout_s 480"
      echo "  $((i + 1)). carry [] command: bash scripts/gpu-node.sh measure mfu   timeout_s 300"
    fi
    i=$((i + 1))
  done
}

receive() {  # a part arrived (and, with part 1, what the image is)
  mkdir -p "$OUT"
  python3 - "$BUNDLE" "$1" <<'EOF'
import hashlib, json, sys
from pathlib import Path
bundle, n = Path(sys.argv[1]), int(sys.argv[2])
manifest = json.loads((bundle / "manifest.json").read_text())
part = manifest["parts"][n - 1]
path = bundle / part["name"]
sha = hashlib.sha256(path.read_bytes()).hexdigest()
print(f"part {n}: {path.name} {'ok' if sha == part['sha256'] else 'DAMAGED'}")
sys.exit(0 if sha == part["sha256"] else 1)
EOF
  local rc=$?
  if [ "$1" = 1 ]; then
    python3 -m pip list --format=freeze >"$OUT/image-pip-list.txt" 2>/dev/null
    nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
    nvidia-smi topo -m >"$OUT/nvidia-smi-topo-m.txt" 2>&1
    python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))' \
      >"$OUT/torch.txt" 2>&1
    diff <(sort "$HAVE") <(sort "$OUT/image-pip-list.txt") >"$OUT/image-diff.txt" \
      && echo "image as expected" || echo "image differs from $HAVE: $OUT/image-diff.txt"
    cat "$OUT/torch.txt"
  fi
  return $rc
}

measure() {  # measure [STEP...]: the steps named (default: all, in order)
  local steps=("$@")
  [ ${#steps[@]} -gt 0 ] || steps=(install startup traced mfu)
  mkdir -p "$OUT"
  touch "$OUT/summary.md"
  export PATH="$VENV/bin:$PATH"
  local extra=(${EXTRA_SETS:-})  # word-split on purpose: --set K=V pairs without spaces
  for s in "${steps[@]}"; do
    case "$s" in
      install) measure_install ;;
      startup) measure_startup ;;
      traced) measure_traced "${extra[@]}" ;;
      mfu) measure_mfu "${extra[@]}" ;;
      *) echo "unknown step $s (allowed: install startup traced mfu)" >&2; return 2 ;;
    esac
  done
  cat "$OUT/summary.md"
}

measure_install() {  # the last part arrived with this call; then the bundle into $VENV
  receive "$(python3 -c "import json;print(len(json.load(open('$BUNDLE/manifest.json'))['parts']))")"
  step install 100 sh "$BUNDLE/install-bundle.sh" "$VENV"
}

measure_startup() {  # selftest's launcher checks: fork vs actors start-up (orchestrator/selftest)
  local st=$OUT/startup/selftest
  step startup 200 linksweep selftest --quick --out "$st" \
    --only one_rank,one_rank_launchers,rehearsal_shared_gpu,shared_gpu_fork
  { cat "$st/startup.csv"; echo; cat "$st/checks.csv"; } >"$OUT/startup/tables.csv" 2>/dev/null
  { echo "### startup"; cat "$OUT/startup/tables.csv"; } >>"$OUT/summary.md" 2>/dev/null
}

measure_traced() {  # two ranks sharing the GPU (DDP), then one rank; what their spans hold
  local db=$OUT/traced/traced.duckdb
  local short=(--set steps=3 --set warmup_steps=2 --set repeats=1 --set 'links={default: {}}'
    --set grid.linkbench=false --set 'trace={steps: 2}' --set launcher=fork --db "$db" "$@")
  step traced 150 bash -c "linksweep run $CLASSIC ${SHARE-"--set ranks_per_gpu=2"} ${short[*]@Q};
    linksweep run $CLASSIC --set world_size=1 --set name=traced-one-rank ${short[*]@Q}"
  step spans 20 bash -c "python3 scripts/trace_spans.py --csv $OUT/traced/tables.csv \
    \$(find ${db%.duckdb}.traces -name '*-rank*.json.gz' | sort)"  # the ranks' own files
  local q  # one clock: each rank's offset, exposed = waited + transfer, the straggler verdict
  for q in "SELECT run_id, rank, clock_offset_ns, clock_uncertainty_ns FROM traces ORDER BY ALL" \
    "SELECT * FROM trace_wait_summary" "SELECT run_id, straggler_rank, straggler_why FROM runs"; do
    linksweep query --db "$db" --format csv "$q" >>"$OUT/traced/tables.csv" 2>&1
    echo >>"$OUT/traced/tables.csv"
  done
  { echo "### traced"; cat "$OUT/traced/tables.csv"; } >>"$OUT/summary.md" 2>/dev/null
}

measure_mfu() {  # the modern file's one-rank run (compiled with inductor): MFU and phases
  local db=$OUT/mfu/mfu.duckdb
  step mfu 240 linksweep run "$MODERN" --set world_size=1 --set 'links={default: {}}' \
    --set 'grid.strategy=[ddp]' --set grid.linkbench=false --set repeats=1 --set steps=20 \
    --set launcher=fork --db "$db" "$@"
  local q
  for q in "SELECT * FROM run_summary" \
    "SELECT run_id, compile, launcher, optimizer_impl, compile_backend, compile_cache,
       recompiles_timed, recompiles_profiled, startup_s, peak_mem_bytes, mfu FROM runs" \
    "PIVOT (SELECT run_id, phase, round(seconds, 3) AS s FROM run_phases
       WHERE rank IS NULL OR rank = 0) ON phase USING max(s) ORDER BY run_id"; do
    linksweep query --db "$db" --format csv "$q" >>"$OUT/mfu/tables.csv" 2>&1
    echo >>"$OUT/mfu/tables.csv"
  done
  { echo "### mfu"; cat "$OUT/mfu/tables.csv"; } >>"$OUT/summary.md"
}

case "${1:-}" in
  prepare) prepare ;;
  receive) receive "${2:?part number}" ;;
  measure) shift; measure "$@" ;;
  *) echo "usage: bash scripts/gpu-node.sh prepare | receive N | measure [STEP...]" >&2; exit 2 ;;
esac
