#!/usr/bin/env bash
# The GPU smoke check: cold-start SFT and a few GRPO steps in bf16 on CUDA (sync, then async rollouts), the stage functions
# called directly, then cold-start SFT under DeepSpeed ZeRO-2, on a machine with its own Python
# (torch, transformers, accelerate, peft) and no network. docs/scaling.md says what it checks.
#
#   bash bench/gpu_smoke.sh fetch   # here, once: the wheels that machine may lack -> bench/gpu_wheels/
#   bash bench/gpu_smoke.sh         # there, with bench/gpu_wheels carried: writes $OUT/gpu_smoke.md
#
# Settings (environment):
#   GPU_SMOKE_PYTHON          the machine's Python, the one with torch (default python3)
#   GPU_SMOKE_DEVICE          cuda (default) or cpu: a CPU rehearsal in fp32
#   GPU_SMOKE_WHEELS          the wheel folder (default bench/gpu_wheels)
#   GPU_SMOKE_PYTHON_VERSION  fetch: the Python the wheels are for (default 3.12, the GPU image's)
#   GPU_SMOKE_PRETEND_MISSING distributions to treat as absent, to rehearse the install on a full venv
#   GPU_SMOKE_TIMEOUT         seconds for the stages (default 330)
#   OUT                       where the report goes (default runs/gpu_smoke)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${GPU_SMOKE_PYTHON:-python3}
WHEELS=${GPU_SMOKE_WHEELS:-bench/gpu_wheels}

if [ "${1:-}" = fetch ]; then
    VENV_PY=${GPU_SMOKE_PYTHON:-.venv/bin/python}
    exec "$VENV_PY" bench/gpu_smoke.py fetch --dest "$WHEELS" --python-version "${GPU_SMOKE_PYTHON_VERSION:-3.12}"
fi

DEVICE=${GPU_SMOKE_DEVICE:-cuda}
OUT=${OUT:-$ROOT/runs/gpu_smoke}
VENV=$(mktemp -d "${TMPDIR:-/tmp}/gpu_smoke_venv.XXXXXX")
trap 'rm -rf "$VENV"' EXIT
mkdir -p "$OUT"
echo "== $("$PY" -c 'import sys, torch; print(sys.executable, sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())')"

# A venv that sees the machine's packages. The machine's Python may itself be a venv (/opt/torch/.venv
# there), whose packages --system-site-packages does not reach: a .pth file puts them on the path,
# after the venv's own, so a carried wheel wins over the machine's copy.
"$PY" -m venv --without-pip --system-site-packages "$VENV"
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" -c 'import site; print("\n".join(site.getsitepackages()))' > "$SITE/_gpu_smoke_machine.pth"

echo "== which wheels the stage path needs here"
"$PY" bench/gpu_smoke.py plan --wheels "$WHEELS" --report "$OUT/gpu_smoke_env.json" \
    --pretend-missing "${GPU_SMOKE_PRETEND_MISSING:-}" > "$VENV/install.txt"
mapfile -t INSTALL < <(grep -v '^$' "$VENV/install.txt" || true)
if [ "${#INSTALL[@]}" -gt 0 ]; then
    printf '   %s\n' "${INSTALL[@]##*/}"
    "$PY" -m pip install -q --no-deps --no-index --no-compile --disable-pip-version-check --target "$SITE" "${INSTALL[@]}"
else
    echo "   none"
fi

echo "== cold-start SFT, GRPO, generation, ZeRO-2 SFT on $DEVICE"
export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
timeout --signal=INT --kill-after=20 "${GPU_SMOKE_TIMEOUT:-330}" \
    "$VENV/bin/python" bench/gpu_smoke.py run --device "$DEVICE" --out "$OUT" --env-report "$OUT/gpu_smoke_env.json"
