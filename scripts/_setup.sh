# Sourced by scripts/run and scripts/test: install what mnemofs needs on a machine that has only
# Python and Debian's package manager, then put the project's venv first on PATH.
#   MNEMOFS_VENV   where the venv lives (default: .venv in the checkout)
#   PYTHON         the Python that makes it (default: python3)

log() { printf '== %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian packages: FUSE (runtime, and headers to build pyfuse3), PostgreSQL, the tools the
# mounted tests drive, and bindfs as the benchmark's baseline.
ensure_debian_packages() {
  local need=() tool
  command -v fusermount3 >/dev/null || need+=(fuse3)
  pkg-config --exists fuse3 2>/dev/null || need+=(libfuse3-dev pkg-config)
  command -v gcc >/dev/null || need+=(gcc)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  for tool in rsync:rsync bindfs:bindfs vim:vim runuser:util-linux; do
    command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
  done
  if [ ${#need[@]} -gt 0 ]; then
    log "installing Debian packages: ${need[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${need[@]}" >/dev/null
  fi
}

# The Python environment, reinstalled only when pyproject.toml changes.
ensure_venv() {
  local venv=${MNEMOFS_VENV:-$PWD/.venv} stamp want
  stamp="$venv/.mnemofs-stamp"
  want=$(sha256sum pyproject.toml | cut -d' ' -f1)
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing mnemofs and its test extras into $venv"
    [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -e ".[test]"
    echo "$want" > "$stamp"
  fi
  export PATH="$venv/bin:$PATH"
}
