# Sourced by scripts/run and scripts/test: install what mnemofs needs on a machine that has only
# Python and Debian's package manager, then put the project's venv first on PATH.
#   MNEMOFS_VENV   where the venv lives (default: .venv in the checkout)
#   PYTHON         the Python that makes it (default: see project_python)

log() { printf '== %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian packages named by the caller, none if the list is empty.
apt_install() {
  [ $# -gt 0 ] || return 0
  log "installing Debian packages: $*"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "$@" >/dev/null
}

# The Python the venv is made from: $PYTHON if set, else the distribution's own python3 when it
# is 3.11 or later and can make a venv that builds pyfuse3 (or root can install what it lacks:
# ensure_debian_packages), else the first python3 on PATH. Debian builds its CPython with
# profile-guided optimisation and LTO; on a plain source build (pyenv's default) mnemofs's
# Python runs ~15% slower: the suite without mounts 166 s against 141 (docs/decisions.md, "The
# interpreter").
SYSTEM_PYTHON=/usr/bin/python3
project_python() {
  if [ -n "${PYTHON:-}" ]; then
    echo "$PYTHON"
  elif "$SYSTEM_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
    && { [ "$(id -u)" = 0 ] || system_python_complete; }; then
    echo "$SYSTEM_PYTHON"
  else
    command -v python3
  fi
}

# Has the distribution's Python its venv module and its headers (python3-venv, python3-dev)?
system_python_complete() {
  "$SYSTEM_PYTHON" -c 'import ensurepip, os, sysconfig
raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))' \
    2>/dev/null
}

# Debian packages: FUSE (runtime, and headers to build pyfuse3), PostgreSQL, the tools the
# mounted tests drive, bindfs as the benchmark's baseline, and the distribution Python's venv
# module and headers when the venv is made from it.
ensure_debian_packages() {
  local need=() tool
  if [ "$(project_python)" = "$SYSTEM_PYTHON" ] && ! system_python_complete; then
    need+=(python3-venv python3-dev)
  fi
  command -v fusermount3 >/dev/null || need+=(fuse3)
  pkg-config --exists fuse3 2>/dev/null || need+=(libfuse3-dev pkg-config)
  command -v gcc >/dev/null || need+=(gcc)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  for tool in rsync:rsync bindfs:bindfs vim:vim runuser:util-linux strace:strace \
    iptables:iptables ip:iproute2; do
    command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
  done
  apt_install ${need[@]+"${need[@]}"}
}

# The Python environment, reinstalled when pyproject.toml changes and made anew when the
# Python it is made from does.
ensure_venv() {
  local venv=${MNEMOFS_VENV:-$PWD/.venv} stamp want python made
  stamp="$venv/.mnemofs-stamp"
  python=$(project_python)
  want="$(sha256sum pyproject.toml | cut -d' ' -f1) $python"
  made=$(cat "$stamp" 2>/dev/null || true)
  if [ ! -x "$venv/bin/python" ] || [ "$made" != "$want" ]; then
    log "installing mnemofs and its test extras into $venv ($python)"
    if [ ! -x "$venv/bin/python" ] || [ "${made#* }" != "$python" ]; then
      "$python" -m venv --clear "$venv"
    fi
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -e ".[test]"
    echo "$want" > "$stamp"
  fi
  # An editable install leaves mnemofs's own modules uncompiled, and where the environment sets
  # PYTHONDONTWRITEBYTECODE every process compiles them again at start (~0.1 s for the CLI, more
  # for a mount): compile them here, as pip does for an installed package. Only changed files.
  "$venv/bin/python" -m compileall -q src/mnemofs >/dev/null
  export PATH="$venv/bin:$PATH"
}

# A throwaway PostgreSQL cluster on a Unix socket in its own directory, stopped and removed
# when the calling script exits. Exports MNEMOFS_TEST_PG_URL (database mnemofs_test). Durability
# settings are off: these clusters hold nothing worth keeping.
start_postgres() {
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  PG_DIR=$(mktemp -d /tmp/mnemofs-pg.XXXXXX)
  chmod 755 "$PG_DIR"  # its socket must be reachable by other users (the container tests)
  PG_AS=()
  if [ "$(id -u)" = 0 ]; then chown postgres: "$PG_DIR"; PG_AS=(runuser -u postgres --); fi
  trap stop_postgres EXIT
  log "starting PostgreSQL in $PG_DIR"
  "${PG_AS[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U mnemofs -A trust -E UTF8 \
    --locale=C.UTF-8 >/dev/null
  "${PG_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w -o \
    "-k $PG_DIR -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null
  "${PG_AS[@]}" "$PG_BIN/createdb" -h "$PG_DIR" -U mnemofs mnemofs_test
  export MNEMOFS_TEST_PG_URL="postgresql+psycopg://mnemofs@/mnemofs_test?host=$PG_DIR"
}

stop_postgres() {
  "${PG_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$PG_DIR"
}

# Container tests: podman (with runc) builds and runs the Dockerfile from a local Debian base
# image made with debootstrap from this machine's own apt mirror (there is no registry to pull
# from). The base is imported once as $MNEMOFS_BASE_IMAGE and kept in podman's image store, so
# later runs take seconds. MNEMOFS_SKIP_CONTAINERS=1 skips all of this (a developer's choice).
MNEMOFS_BASE_IMAGE=${MNEMOFS_BASE_IMAGE:-localhost/mnemofs-base:bookworm}
ensure_container_tools() {
  local need=() tool
  for tool in podman:podman runc:runc debootstrap:debootstrap; do
    command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
  done
  apt_install ${need[@]+"${need[@]}"}
}

ensure_base_image() {
  if podman image exists "$MNEMOFS_BASE_IMAGE"; then
    export MNEMOFS_BASE_IMAGE
    return
  fi
  local suite mirror rootfs
  suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
  rootfs=$(mktemp -d /tmp/mnemofs-rootfs.XXXXXX)
  log "building the base image $MNEMOFS_BASE_IMAGE with debootstrap ($suite)"
  as_root debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$suite" "$rootfs" "$mirror" >/dev/null
  as_root rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  as_root tar -C "$rootfs" -c . | podman import - "$MNEMOFS_BASE_IMAGE" >/dev/null
  as_root rm -rf "$rootfs"
  export MNEMOFS_BASE_IMAGE
}

# Run scripts/<name>.py in the project's environment, set up as scripts/run does, from the
# caller's directory (so relative paths in the arguments mean what the caller meant).
run_python_script() {
  local name=$1 top here
  shift
  here=$PWD
  top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  cd "$top"
  ensure_debian_packages
  ensure_venv
  cd "$here"
  python "$top/scripts/$name.py" "$@"
}

asks_for_help() { [[ " $* " == *" -h "* || " $* " == *" --help "* ]]; }

# Whether a benchmark's arguments ask for PostgreSQL with no server of their own: a bare --pg
# (not `--pg URL` or `--pg=URL`), with $MNEMOFS_TEST_PG_URL unset; start_postgres's job then.
wants_throwaway_pg() {
  local arg prev= pg=0
  for arg in "$@"; do
    if [ "$arg" = --pg ]; then
      pg=1
    elif [ "$prev" = --pg ] && [ "${arg#-}" = "$arg" ]; then
      pg=0 # --pg URL
    fi
    prev=$arg
  done
  [ "$pg" = 1 ] && [ -z "${MNEMOFS_TEST_PG_URL:-}" ]
}

# The comment block at the top of a script (after the #! line), as its --help.
print_usage() { sed -n '2,/^[^#]/{/^#/!q;s/^# \{0,1\}//;p}' "$1"; }
