#!/usr/bin/env bash
# gpool's test command (README.md, .ci/run): installs the services that the
# tests start on loopback (Prometheus and PostgreSQL, from Debian's packages)
# and the browser the dashboard's tests drive (Chromium) when they are
# missing, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
command -v flock >/dev/null 2>&1 || need+=(util-linux)
# setpriv (tests run the CLI as other users), useradd (tests make users), cc (the chaos suite's slow disk, the escape tests' programs).
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
command -v useradd >/dev/null 2>&1 || need+=(passwd)
command -v cc >/dev/null 2>&1 || need+=(gcc)
# systemd-analyze checks the units offline (tests/units.rs); no systemd need run.
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
# tests/package.rs installs the .deb on a fresh Debian 12 (debootstrap) booted in systemd-nspawn.
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v systemd-nspawn >/dev/null 2>&1 || need+=(systemd-container)
# The escape tests build a static setuid program and a preload library: the C library's headers and libc.a.
[ -e /usr/include/stdio.h ] && ls /usr/lib/*/libc.a >/dev/null 2>&1 || need+=(libc6-dev)
# podman and runc run the jobs of the container tests; busybox-static is their image's only program.
containers=()
command -v podman >/dev/null 2>&1 || containers+=(podman)
command -v runc >/dev/null 2>&1 || containers+=(runc)
command -v busybox >/dev/null 2>&1 || containers+=(busybox-static)
# docker (its own dockerd, started by tests/docker.rs) and a password-protected registry for the authenticated pull.
command -v dockerd >/dev/null 2>&1 && [ -x /usr/bin/docker ] || containers+=(docker.io)
command -v docker-registry >/dev/null 2>&1 || containers+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || containers+=(apache2-utils)
# Chromium runs the dashboard's browser tests (tests/dashboard.rs drives it over the DevTools Protocol).
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need+=(chromium fonts-dejavu-core)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#need[@]} -gt 0 ] || [ ${#containers[@]} -gt 0 ]; then
  $sudo apt-get update -qq
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]} (Debian packages) for the tests that start them"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if [ ${#containers[@]} -gt 0 ]; then
  echo "== installing ${containers[*]} (Debian packages) for the container tests"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${containers[@]}"
fi

# From PyPI, in target/pytools: openapi-spec-validator checks the API document
# and schemathesis fuzzes a live daemon from it (tests/openapi.rs); py-spy and
# NumPy let tests/profile.rs profile real Python jobs.
pip_need=()
[ -x target/pytools/bin/openapi-spec-validator ] || command -v openapi-spec-validator >/dev/null 2>&1 \
  || pip_need+=(openapi-spec-validator)
[ -x target/pytools/bin/py-spy ] || pip_need+=(py-spy)
[ -x target/pytools/bin/schemathesis ] || pip_need+=("schemathesis==4.32.5")
{ [ -x target/pytools/bin/python ] && target/pytools/bin/python -c 'import numpy' 2>/dev/null; } || pip_need+=(numpy)
if [ ${#pip_need[@]} -gt 0 ]; then
  echo "== installing ${pip_need[*]} (PyPI) in target/pytools for the tests that use them"
  if [ ! -x target/pytools/bin/pip ] && ! python3 -m venv target/pytools >/dev/null 2>&1; then
    rm -rf target/pytools
    [ -n "${need[*]:-}${containers[*]:-}" ] || $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv
    python3 -m venv target/pytools
  fi
  target/pytools/bin/pip install -q "${pip_need[@]}"
fi

exec cargo test --workspace "$@"
