#!/usr/bin/env bash
# Create (or refresh) the virtualenv with the newest Python >= 3.12 that actually runs,
# else Python 3.11 (pip then resolves Django 5.2 LTS). Installs requirements-dev.txt.
set -euo pipefail
venv=${1:-.venv}
stamp="$venv/.installed"

works() { "$1" -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, '"$2"') else 1)' >/dev/null 2>&1; }

pick() {
  local c
  local candidates=(python3.14 python3.13 python3.12)
  if command -v pyenv >/dev/null 2>&1; then
    local root; root=$(pyenv root)
    # pyenv's shims fail for versions that are installed but not selected: use the binaries.
    while IFS= read -r c; do candidates+=("$c"); done < <(ls -d "$root"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV)
  fi
  for c in "${candidates[@]}"; do works "$c" 12 && { echo "$c"; return; }; done
  for c in python3.11 python3; do works "$c" 11 && { echo "$c"; return; }; done
  echo "no Python >= 3.11 found; install one (3.12+ recommended)" >&2
  exit 1
}

if [ ! -x "$venv/bin/python" ]; then
  py=$(pick)
  echo "creating $venv with $("$py" --version 2>&1) ($py)"
  "$py" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ requirements-dev.txt -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # (this machine's pip config names local mirrors that may not exist: drop that noise only)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip 2> >(grep -v "^WARNING: Location" >&2)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt 2> >(grep -v "^WARNING: Location" >&2)
  touch "$stamp"
fi
