#!/usr/bin/env bash
# Usage: tools/compare_commands/run.sh CHECKOUT OUTDIR
# Runs every latopt command (small: digits, mobilenetv2_035 at 16 px, the flops count device) against the latopt
# code of CHECKOUT (a clone at some commit, put first on PYTHONPATH; the python on PATH must have latopt's
# dependencies, e.g. the project's activated .venv), in a fresh scratch directory OUTDIR/scratch, saving
# OUTDIR/NN-name.{out,err,rc} and the files the commands write in OUTDIR/files/. Run it for two commits, then
# compare_outputs.py OUT_A OUT_B: what a refactoring must leave unchanged (docs/development.md). About 5 min each.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)   # before any cd: $0 may be relative
CHECKOUT=$(cd "$1" && pwd)
OUTDIR=$2
# OUTDIR is replaced: only an earlier run's output (it holds checkout.txt) or a missing/empty directory
if [ -e "$OUTDIR" ] && [ ! -e "$OUTDIR/checkout.txt" ] && [ -n "$(ls -A "$OUTDIR" 2>/dev/null)" ]; then
    echo "run.sh: error: $OUTDIR exists and is not an earlier run's output; give a new directory" >&2; exit 2
fi
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR/files"
OUTDIR=$(cd "$OUTDIR" && pwd)
SCRATCH="$OUTDIR/scratch"
mkdir -p "$SCRATCH" "$SCRATCH/cache"
cd "$SCRATCH"

echo "$CHECKOUT" > "$OUTDIR/checkout.txt"
export PYTHONPATH="$CHECKOUT"
export LATOPT_CACHE_DIR="$SCRATCH/cache"
export HF_HUB_OFFLINE=1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
unset LATOPT_PROFILES_DIR LATOPT_DATA
python -c "import latopt, sys; assert latopt.__file__.startswith('$CHECKOUT'), latopt.__file__; print(latopt.__file__)" \
    > "$OUTDIR/latopt-file.txt" || exit 1

N=0
# c NAME ARGS...: run `python -m latopt ARGS` and record stdout, stderr, exit code and wall time
c() {
    local name=$1; shift
    local tag; tag=$(printf '%02d-%s' "$N" "$name"); N=$((N + 1))
    local t0=$SECONDS
    timeout 900 python -m latopt "$@" > "$OUTDIR/$tag.out" 2> "$OUTDIR/$tag.err" < /dev/null
    echo $? > "$OUTDIR/$tag.rc"
    echo "$tag rc=$(cat "$OUTDIR/$tag.rc") $((SECONDS - t0))s :: latopt $*" | tee -a "$OUTDIR/commands.txt"
}

# k NAME RESUMEFILE ARGS...: start `latopt ARGS`, SIGKILL it as soon as RESUMEFILE (its epoch state) exists;
# what it printed is kept as NN-name.killed.{out,err} (not compared: it depends on when the kill lands)
k() {
    local name=$1 state=$2; shift 2
    local tag; tag=$(printf '%02d-%s' "$N" "$name"); N=$((N + 1))
    python -m latopt "$@" > "$OUTDIR/$tag.killed.out" 2> "$OUTDIR/$tag.killed.err" < /dev/null &
    local pid=$! i=0
    while [ ! -e "$state" ] && [ $i -lt 600 ] && kill -0 $pid 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    echo "$tag killed (state file present: $([ -e "$state" ] && echo yes || echo no)) :: latopt $*" \
        | tee -a "$OUTDIR/commands.txt"
}
# p NAME PYTHON-CODE: a check in Python (same venv and checkout), recorded like a command
p() {
    local name=$1; shift
    local tag; tag=$(printf '%02d-%s' "$N" "$name"); N=$((N + 1))
    python -c "$1" > "$OUTDIR/$tag.out" 2> "$OUTDIR/$tag.err" < /dev/null
    echo $? > "$OUTDIR/$tag.rc"
    echo "$tag rc=$(cat "$OUTDIR/$tag.rc") :: python check $name" | tee -a "$OUTDIR/commands.txt"
}

# inputs that are not latopt's: the tiny config, a bad one, a text file, a state_dict to import
cp "$HERE/tiny.yaml" tiny.yaml
sed 's/^  lr: 0.01$/  lr: 0.01\n  no_such_key: 3/' tiny.yaml > bad-key.yaml
echo "this is not a checkpoint" > notckpt.pt
python - <<'EOF'
import torch, timm
torch.manual_seed(0)
m = timm.create_model("mobilenetv2_035", num_classes=10)
torch.save(m.state_dict(), "weights.pth")
EOF
LUT=profiles/flops/mobilenetv2_035-r16-b1.json

# --help of every command
c help --help
c version --version
for cmd in inspect import profile train fold search plan export run train-mlp compress regions shallow; do
    c "help-$cmd" "$cmd" --help
done

# the CNN pipeline
c inspect inspect mobilenetv2_035 --resolution 32 --num-classes 10 --check-fold --json inspect.json
c import import weights.pth --model mobilenetv2_035 --out imported.pt
c inspect-imported inspect --checkpoint imported.pt --resolution 16 --check-fold --json inspect-imported.json
c profile profile --device flops --model mobilenetv2_035 --resolution 16 --num-classes 10 --variants full,pw,drop
c train train --config tiny.yaml --epochs 2 --threads 1 --train-device cpu
c inspect-base inspect --checkpoint runs/tiny/base/base.pt --check-fold --data digits --json inspect-base.json
c fold fold --config tiny.yaml --checkpoint runs/tiny/base/base.pt --lut "$LUT" --lambda-c 1 --threads 1 \
    --train-device cpu
c plan-uniform plan --config tiny.yaml --plan-only --budget 0.7 --importance uniform --lut "$LUT" --out plan-uniform.json
c plan-proxy plan --config tiny.yaml --plan-only --budget 0.6 --importance proxy --base runs/tiny/base/base.pt \
    --lut "$LUT" --out plan-proxy.json
c plan-budget plan --config tiny.yaml --budget 0.7 --importance uniform --base runs/tiny/base/base.pt --lut "$LUT" \
    --threads 1
c export-folded export --checkpoint runs/tiny/fold/folded.pt --device flops --lut "$LUT" --out exp-folded
c export-plan export --checkpoint runs/tiny/base/base.pt --plan plan-proxy.json --device flops --lut "$LUT" \
    --timing-only --out exp-plan
c export-cpu export --checkpoint runs/tiny/base/base.pt --device cpu --no-measure --out exp-cpu
c export-fold-all export --checkpoint runs/tiny/base/base.pt --fold all --device flops --lut "$LUT" \
    --no-accuracy-gate --out exp-foldall
c search search --config tiny.yaml --trials 2 --base runs/tiny/base/base.pt --lut "$LUT" --threads 1
c search-show search --show --study tiny --out show
c search-resume search --config tiny.yaml --trials 3 --base runs/tiny/base/base.pt --lut "$LUT" --threads 1
c plan-study plan --config tiny.yaml --budgets 0.6,0.8 --importance uniform --base runs/tiny/base/base.pt \
    --lut "$LUT" --threads 1
c search-show-both search --show --study tiny --out show-both
c search-show-dp search --show --study tiny-dp --out show-dp
# an interrupted train resumes (latopt/training/resume.py): killed after its first epoch state, rerun, and
# compared with the same training uninterrupted
k train-killed resume/base.resume.pt train --config tiny.yaml --epochs 4 --threads 1 --train-device cpu --out resume/base
c train-resumed train --config tiny.yaml --epochs 4 --threads 1 --train-device cpu --out resume/base
c train-uninterrupted train --config tiny.yaml --epochs 4 --threads 1 --train-device cpu --out resume/whole
p resume-check "
import torch
a = torch.load('resume/base/base.pt', weights_only=True); b = torch.load('resume/whole/base.pt', weights_only=True)
sa, sb = a['state_dict'], b['state_dict']
print('resumed == uninterrupted, every tensor:', sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa))
"
c run run tiny.yaml --trials 2 --runs-dir runs-run
c run-again run tiny.yaml --trials 2 --runs-dir runs-run
sed 's/^method: layerfold$/method: dp/; s/^name: tiny$/name: tinydp/' tiny.yaml > tinydp.yaml
c run-dp run tinydp.yaml --runs-dir runs-run

# the exact tools
c train-mlp train-mlp --data digits --hidden 12,12 --epochs 3 --out mlp/digits.pt --threads 1
c train-mlp-random train-mlp --data random --inputs 2 --hidden 4,4 --outputs 1 --out mlp/r.pt
c compress compress mlp/digits.pt --samples 2000 --time-limit 10 --out compress --threads 1
c compress-random compress mlp/r.pt --samples 2000 --out compress-r
c regions regions mlp/r.pt --grid 200 --out regions
c shallow shallow mlp/r.pt --samples 20000 --out shallow

# bad inputs
c bad-device profile --device no_such_device --model mobilenetv2_035 --resolution 16
c bad-missing-ckpt export --checkpoint no/such/file.pt --device flops
c bad-notckpt export --checkpoint notckpt.pt --device flops
c bad-notckpt-compress compress notckpt.pt
c bad-budget-range plan --config tiny.yaml --plan-only --budget 1.5 --importance uniform --lut "$LUT"
c bad-budget-text plan --config tiny.yaml --plan-only --budget abc --importance uniform
c bad-model inspect no_such_model_xyz --resolution 32
c bad-config-key train --config bad-key.yaml --epochs 1
c bad-config-missing train --config no-such-config.yaml
c bad-search-budget search --config tiny.yaml --budget 0.5
c bad-fold-gate export --checkpoint runs/tiny/base/base.pt --fold all --device flops --lut "$LUT"
c bad-show-study search --show --study no_such_study
c bad-fold-ckpt fold --config tiny.yaml --checkpoint no_such.pt
c bad-import import weights.pth --model mobilenetv2_050 --out bad-import.pt
c bad-plan-ckpt export --checkpoint runs/tiny/base/base.pt --plan tiny.yaml --device flops --timing-only

# the files the commands wrote (text), and the digests of the binary ones
cd "$SCRATCH"
find . -path ./cache -prune -o -type f \( -name '*.json' -o -name '*.csv' -o -name '*.md' -o -name '*.txt' \
    -o -name '*.yaml' \) -print | sort | while read -r f; do
    mkdir -p "$OUTDIR/files/$(dirname "$f")"; cp "$f" "$OUTDIR/files/$f"
done
find . -path ./cache -prune -o -type f -print | sort > "$OUTDIR/files/_all-files.lst"
find . -path ./cache -prune -o -type f \( -name '*.pt' -o -name '*.onnx' -o -name '*.pth' \) -print | sort \
    | xargs -r sha256sum > "$OUTDIR/files/_binaries.sha256"
