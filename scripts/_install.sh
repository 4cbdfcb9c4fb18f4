# Sourced by setup-venv.sh and ensure-vllm.sh: `venv_install VENV ARGS...` installs pip
# requirements into the virtual environment VENV with uv (a pip-compatible installer that
# resolves and links from its cache in seconds where pip takes minutes: measured 30 s
# against 396 s for .venv on this machine), taking this machine's pip settings (find-links,
# index, constraints) along. pip stays the fallback: where uv cannot be had or fails, the
# same arguments go to pip, so the set-up is never worse than pip's (ALE_INSTALLER=pip asks
# for pip alone).

_uv_settings() {  # pip's configuration as uv flags (only the settings uv also has)
  local line key value item
  while IFS= read -r line; do
    key=${line%%=*}
    value=${line#*=}
    value=${value#\'}
    value=${value%\'}
    case "$key" in
      *.find-links)
        for item in $value; do [ -e "$item" ] && printf '%s\n' --find-links "$item"; done ;;
      *.index-url)
        printf '%s\n' --index-url "$value" ;;
      *.extra-index-url)
        for item in $value; do
          case "$item" in file://*) [ -d "${item#file://}" ] || continue ;; esac
          printf '%s\n' --extra-index-url "$item"
        done ;;
      *.constraint)
        for item in $value; do [ -f "$item" ] && printf '%s\n' --constraint "$item"; done ;;
    esac
  done < <("$1/bin/python" -m pip config list 2>/dev/null)
}

venv_install() {  # VENV ARGS...; ALE_UV names a uv to use instead of installing one in VENV
  local venv=$1 uv=${ALE_UV:-$1/bin/uv}
  shift
  if [ "${ALE_INSTALLER:-uv}" = uv ] && [ ! -x "$uv" ]; then
    uv=$venv/bin/uv
    "$venv/bin/python" -m pip install -q "uv==0.13.9" >/dev/null 2>&1 || true
  fi
  if [ "${ALE_INSTALLER:-uv}" = uv ] && [ -x "$uv" ]; then
    local settings=()
    mapfile -t settings < <(_uv_settings "$venv")
    # as pip does: every index counts for every package (unsafe-best-match), and the
    # modules are compiled to bytecode at install time (uv leaves that to the first import,
    # which never writes it where PYTHONDONTWRITEBYTECODE is set, as on this machine: every
    # process then compiled torch again, and make test took 30 minutes instead of 21)
    if "$uv" pip install -q --python "$venv/bin/python" --index-strategy unsafe-best-match \
        --compile-bytecode "${settings[@]}" "$@"; then
      return 0
    fi
    echo "[install] uv failed (above); installing the same with pip" >&2
  fi
  "$venv/bin/pip" install -q "$@"
}
