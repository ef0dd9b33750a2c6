#!/usr/bin/env bash
# Create (or refresh) the virtualenv from the lock of its stack (locks/, `make lock`), so every
# machine and CI install the same versions: Python 3.13 (Django 6.x) when one runs here, else the
# newest Python >= 3.12, else Python 3.11 (Django 5.2 LTS). The project itself is installed
# editable without dependencies (the lock holds them). A Python without a lock installs
# requirements-dev.txt unpinned, and says so.
set -euo pipefail
venv=${1:-.venv}
stamp="$venv/.installed"

works() { "$1" -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, '"$2"') else 1)' >/dev/null 2>&1; }
exact() { "$1" -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info[:2] == (3, '"$2"') else 1)' >/dev/null 2>&1; }

pick() {
  local c
  local locked=(python3.13)
  local candidates=(python3.14 python3.13 python3.12)
  if command -v pyenv >/dev/null 2>&1; then
    local root; root=$(pyenv root)
    # pyenv's shims fail for versions that are installed but not selected: use the binaries.
    while IFS= read -r c; do locked+=("$c"); done < <(ls -d "$root"/versions/3.13*/bin/python3 2>/dev/null | sort -rV)
    while IFS= read -r c; do candidates+=("$c"); done < <(ls -d "$root"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV)
  fi
  for c in "${locked[@]}"; do exact "$c" 13 && { echo "$c"; return; }; done
  for c in "${candidates[@]}"; do works "$c" 12 && { echo "$c"; return; }; done
  for c in python3.11 python3; do works "$c" 11 && { echo "$c"; return; }; done
  echo "no Python >= 3.11 found; install one (3.13 recommended: it has a lock)" >&2
  exit 1
}

if [ ! -x "$venv/bin/python" ]; then
  py=$(pick)
  echo "creating $venv with $("$py" --version 2>&1) ($py)"
  "$py" -m venv "$venv"
fi
case $("$venv/bin/python" -c 'import sys; print("%d%d" % sys.version_info[:2])') in
  313) lock=locks/py313-django6.txt ;;
  311) lock=locks/py311-django52.txt ;;
  *) lock= ;;
esac
if [ -z "$lock" ] && [ "${NRLLM_REQUIRE_LOCK:-}" = 1 ]; then
  echo "$venv: $("$venv/bin/python" --version 2>&1) has no lock in locks/ (NRLLM_REQUIRE_LOCK=1, as in CI); make one with Python 3.13 or 3.11" >&2
  exit 1
fi
# The stamp holds a digest of what was installed from: the venv is refreshed when their content
# changes, not their time (a checkout or a second worktree sharing one venv reinstalls nothing).
inputs=(requirements.txt requirements-dev.txt pyproject.toml ${lock:+"$lock"})
digest=$(cat "${inputs[@]}" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ]; then
  # (this machine's pip config names local mirrors that may not exist: drop that noise only)
  pip() { "$venv/bin/python" -m pip -q --disable-pip-version-check "$@" 2> >(grep -v "^WARNING: Location" >&2); }
  pip install --upgrade pip
  if [ -n "$lock" ]; then
    pip install -r "$lock"
    pip install --no-deps -e .
  else
    echo "$venv: no lock for $("$venv/bin/python" --version 2>&1); installing requirements-dev.txt unpinned" >&2
    pip install -r requirements-dev.txt
  fi
  echo "$digest" >"$stamp"
fi
