#!/usr/bin/env bash
# Create the virtualenvs `make` uses, installing what they need on a fresh machine.
#   .venv       Python 3.13 + Django 6.x (primary)
#   .venv-52    Python 3.11 + Django 5.2 LTS + the django-tasks backport at its lowest
#               supported version (the `tasks` extra's >= bound)
# System packages (Debian): the MariaDB client headers for mysqlclient, Chromium for
# the browser tests and PgBouncer (the tests start their own, in transaction mode, in
# front of the test PostgreSQL); installed when missing and we are root.
set -euo pipefail
cd "$(dirname "$0")/.."
which_venvs="${1:-all}"   # all | primary

need_apt=()
pkg-config --exists libmariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null \
  || need_apt+=(libmariadb-dev pkg-config)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null || need_apt+=(pgbouncer)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing ${need_apt[*]} (apt-get)"
    # Another apt (the machine's own start-up, a second checkout) may hold the lock: wait.
    wait_lock=(-o DPkg::Lock::Timeout=600 -o Acquire::Lock::Timeout=600)
    apt-get "${wait_lock[@]}" update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get "${wait_lock[@]}" install -y -qq "${need_apt[@]}" \
      >/dev/null
  else
    echo "bootstrap: missing system packages ${need_apt[*]}; some tests will be skipped" >&2
  fi
fi

find_python() {  # version -> interpreter path
  local v="$1"
  if command -v pyenv >/dev/null 2>&1; then
    local full
    full=$(pyenv versions --bare 2>/dev/null | grep -E "^${v}(\.|$)" | tail -n1 || true)
    if [ -n "$full" ]; then PYENV_VERSION="$full" pyenv which python 2>/dev/null && return; fi
  fi
  command -v "python${v}" 2>/dev/null || true
}

make_venv() {  # dir python-version django-spec extras [pinned requirement]
  local dir="$1" pyv="$2" django="$3" extras="$4" pinned="${5:-}"
  local stamp="$dir/.kathikon-stamp"
  local want
  want="$(cat pyproject.toml scripts/bootstrap.sh | sha1sum | cut -c1-12) $django $pinned"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  local py
  py=$(find_python "$pyv")
  if [ -z "$py" ]; then
    echo "bootstrap: Python $pyv not found; skipping $dir" >&2
    return 0
  fi
  # Progress on every step: a fresh install takes a minute or more, never in silence.
  echo "bootstrap: creating $dir (Python $pyv, $django); about a minute on a fresh machine"
  rm -rf "$dir"
  echo "bootstrap: [1/3] virtualenv $dir"
  "$py" -m venv "$dir"
  echo "bootstrap: [2/3] upgrading pip"
  "$dir/bin/pip" install -q --upgrade pip 2>&1 | grep -v -i warning || true
  echo "bootstrap: [3/3] installing Django, Kathikon and their dependencies (one line each)"
  # shellcheck disable=SC2086  # $pinned is empty or one requirement
  "$dir/bin/pip" install --progress-bar off "$django" $pinned -e ".[$extras]" 2>&1 \
    | grep --line-buffered -E '^(Collecting|Obtaining|ERROR)' \
    | sed -u -e 's/^Collecting /  - /' -e 's/^Obtaining /  - /' || true
  "$dir/bin/python" -c "import django, kathikon" || { echo "bootstrap: $dir is broken" >&2; exit 1; }
  echo "$want" > "$stamp"
  echo "bootstrap: $dir is ready"
}

make_venv .venv 3.13 "django>=6.0,<7" "dev,docs,typing"
if [ "$which_venvs" = all ]; then
  # The LTS run tests the oldest django-tasks the `tasks` extra allows (its >= bound).
  tasks_floor=$(grep -o '"django-tasks>=[0-9.]*"' pyproject.toml | tr -d '"' | sed 's/>=/==/')
  make_venv .venv-52 3.11 "django>=5.2,<5.3" "dev,tasks" "$tasks_floor"
fi
