#!/usr/bin/env bash
# Creates the modern-tier virtual environment (./.venv): a current torch 2.x,
# transformers and safetensors from PyPI. tests/python/ uses it to check
# frameshard's vision towers against Hugging Face transformers.
#
# Usage: scripts/setup-modern.sh
#   FRAMESHARD_VENV    venv directory (default: <repo>/.venv)
#   FRAMESHARD_TRANSFORMERS
#                      transformers version to install instead of the pinned
#                      one (scripts/setup-transformers.sh: the release matrix).
#                      The pins of what that release itself constrains
#                      (tokenizers, huggingface-hub, hf-xet) are dropped with
#                      it and resolved for it; everything else (torch, the
#                      nvidia wheels, numpy, peft, ...) stays pinned, so uv
#                      links the same cached torch as .venv's.
#   FRAMESHARD_PYTHON  interpreter for the venv (default: pyenv's python3;
#                      Debian's /usr/bin/python3 is refused: its site may hold
#                      Debian's torch 1.13, which frameshard never uses)
#   UV_CACHE_DIR       uv's wheel cache (default: ~/.cache/uv)
#
# Idempotent: when the venv already holds exactly the pinned set below, it only
# prints the versions (well under a second).
#
# Why uv and not plain pip: the PyPI files reached from these machines come
# without cache validators, so pip's HTTP cache never stores them and every
# pip install downloads the 2.9 GB again (measured: 69 s download + 83 s
# install). uv keeps unpacked wheels in its own cache and links them into the
# venv: about 30 s cold, about 2 s warm. uv itself is a PyPI wheel.
#
# Why the nvidia-* wheels: PyPI's torch for Linux is the CUDA build, and its
# libtorch needs libcufile, libcusparseLt and libnvshmem_host at load time even
# on a machine without a GPU; torch installed with --no-deps does not import.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${FRAMESHARD_VENV:-$root/.venv}
uv_version=0.13.8
transformers_pin=5.24.0
transformers=${FRAMESHARD_TRANSFORMERS:-$transformers_pin}

# Top-level requirements (scikit-build-core, nlohmann-json and cmeel-yaml-cpp:
# what `pip install --no-build-isolation .` builds with, see pyproject.toml;
# peft: the LoRA-wrapped model of the Python tests; trl with its vlm extra's
# pillow and torchvision: the optional extra frameshard[trl], its tests and
# example -- torchvision 0.29.2 is the build for torch 2.15.0, and the
# Qwen-VL processors need it for their video processor), and the full pinned
# set (uv pip freeze of a working venv) as constraints, so CI installs the same
# versions every time.
requirements="torch==2.15.0
transformers==$transformers
safetensors==0.8.0
numpy==2.4.6
pytest==9.2.0
scikit-build-core==1.1.2
nlohmann-json==3.12.0
cmeel-yaml-cpp==0.8.0
peft==0.21.2
trl==1.16.0
pillow==13.0.0
torchvision==0.29.2"
constraints="accelerate==1.15.0
datasets==5.2.0
dill==0.4.1
multiprocess==0.70.19
pandas==3.1.1
pyarrow==26.0.1
python-dateutil==4.0.0
tzdata==2026.6
xxhash==4.1.0
cmeel==0.62.0
cmeel-yaml-cpp==0.8.0
importlib-resources==7.1.0
nlohmann-json==3.12.0
peft==0.21.2
psutil==7.2.2
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
click==8.5.1
cuda-bindings==13.5.0
cuda-pathfinder==1.9.1
cuda-toolkit==13.2.2
filelock==4.3.1
fsspec==2026.9.0
h11==0.16.0
hf-xet==1.8.0
httpcore2==2.16.2
httpx2==2.16.2
huggingface-hub==2.4.0
idna==3.20
iniconfig==2.3.1
jinja2==3.1.6
markdown-it-py==4.3.0
markupsafe==3.0.4
mdurl==0.1.2
mpmath==1.3.0
networkx==3.6.1
numpy==2.4.6
nvidia-cublas==13.4.1.3
nvidia-cuda-cccl==13.3.5.0.6
nvidia-cuda-cupti==13.2.86
nvidia-cuda-nvrtc==13.2.86
nvidia-cuda-runtime==13.2.86
nvidia-cudnn-cu13==9.26.0.51
nvidia-cufft==12.2.0.57
nvidia-cufile==1.17.1.22
nvidia-cusolver==12.2.0.11
nvidia-cusparse==12.7.10.12
nvidia-cusparselt-cu13==0.8.1
nvidia-nccl-cu13==2.30.7
nvidia-nvjitlink==13.5.37
nvidia-nvshmem-cu13==3.7.2
nvidia-nvtx==13.2.86
packaging==26.4
pathspec==1.1.1
pluggy==1.7.0
pydantic==2.14.4
pydantic-core==2.50.5
pygments==2.21.0
pytest==9.2.0
pyyaml==6.0.4
regex==2026.11.19
rich==15.0.0
safetensors==0.8.0
setuptools==84.2.1
shellingham==1.5.4
sympy==1.14.0
tokenizers==0.23.3
torch==2.15.0
tqdm==4.70.1
transformers==5.24.0
triton==3.9.0
truststore==0.10.5
typer==0.29.2
typing-extensions==4.16.0
typing-inspection==0.4.5"
if [ "$transformers" != "$transformers_pin" ]; then
  # Measured: 4.57-5.17 need tokenizers <= 0.23.0 or huggingface-hub < 2;
  # the rest of the set resolves unchanged (packages a release adds, such as
  # 5.25's kernels, resolve to their newest).
  constraints=$(printf '%s\n' "$constraints" | grep -v -E '^(transformers|tokenizers|huggingface-hub|hf-xet)==')
fi

print_versions() {
  # importlib.metadata, not `import torch`: keeps the fast path fast.
  "$venv/bin/python" - <<'EOF'
import sys
from importlib.metadata import version
names = ("torch", "transformers", "safetensors", "numpy", "pytest", "scikit-build-core")
print("setup-modern: python %s (%s); %s" % (
    sys.version.split()[0], sys.prefix,
    ", ".join("%s %s" % (n, version(n)) for n in names)))
EOF
}

# pick_python: prints the real path of an interpreter >= 3.10 that is not
# Debian's system python (FRAMESHARD_PYTHON alone when it is set).
pick_python() {
  local cand exe
  local cands=(python3 python3.11 "$HOME"/.pyenv/versions/3.*/bin/python3)
  [ -n "${FRAMESHARD_PYTHON:-}" ] && cands=("$FRAMESHARD_PYTHON")
  for cand in "${cands[@]}"; do
    exe=$("$cand" -c 'import sys; assert sys.version_info >= (3, 10); print(sys.executable)' \
      2>/dev/null) || continue
    case "$exe" in
    /usr/bin/* | /bin/*) continue ;;
    esac
    echo "$exe"
    return 0
  done
  return 1
}

# Two callers at once (parallel ctest, a developer and a test) would install
# into the same venv: serialise them.
lock=${TMPDIR:-/tmp}/frameshard-setup-modern-$(printf '%s' "$venv" | sha256sum | cut -c1-16).lock
exec 9>"$lock"
flock 9

python=$(pick_python) || {
  echo "setup-modern: no python >= 3.10 other than Debian's /usr/bin/python3 found" \
    "(FRAMESHARD_PYTHON=${FRAMESHARD_PYTHON:-unset})" >&2
  exit 1
}
stamp_file=$venv/.frameshard-modern
stamp=$(printf '%s\n%s\n%s\n' "$python" "$requirements" "$constraints" | sha256sum | cut -d' ' -f1)

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp_file" 2>/dev/null)" = "$stamp" ]; then
  print_versions
  exit 0
fi

start=$(date +%s)
if [ -x "$venv/bin/python" ] && [ "$(readlink -f "$venv/bin/python")" != "$(readlink -f "$python")" ]; then
  echo "setup-modern: $venv was made with another python; recreating"
  rm -rf "$venv"
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
rm -f "$stamp_file"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%s\n' "$requirements" >"$tmp/requirements.txt"
printf '%s\n' "$constraints" >"$tmp/constraints.txt"

uv_ok() { [ -x "$1" ] && [ "$("$1" --version 2>/dev/null | cut -d' ' -f2)" = "$uv_version" ]; }
# The venv's own uv, else the main .venv's (a second venv, such as
# setup-transformers.sh's, then needs no pip download of uv), else install it.
uv=$venv/bin/uv
if ! uv_ok "$uv" && uv_ok "$root/.venv/bin/uv"; then
  uv=$root/.venv/bin/uv
fi
if ! uv_ok "$uv"; then
  "$venv/bin/python" -m pip install -q "uv==$uv_version" ||
    echo "setup-modern: could not install uv; falling back to pip (slow: no cache)" >&2
  uv=$venv/bin/uv
fi
if uv_ok "$uv"; then
  "$uv" pip install -q --python "$venv/bin/python" \
    -r "$tmp/requirements.txt" -c "$tmp/constraints.txt"
else
  "$venv/bin/python" -m pip install -q -r "$tmp/requirements.txt" -c "$tmp/constraints.txt"
fi

# A real import and one op, so a broken install fails here and not in a test.
"$venv/bin/python" -c 'import torch, transformers, safetensors
x = torch.ones(2, 2)
assert float((x @ x).sum()) == 8.0'
echo "$stamp" >"$stamp_file"
echo "setup-modern: installed in $(($(date +%s) - start)) s ($(du -sh "$venv" | cut -f1) in $venv)"
print_versions
