#!/usr/bin/env bash
# gpool's release artefacts, from one build (docs/operations.md):
#   DIR/gpool_VERSION_ARCH.deb              a Debian package
#   DIR/gpool-VERSION-x86_64-linux.tar.gz   a release archive
#   DIR/SHA256SUMS                          their checksums
# Usage: scripts/package.sh [--bin PATH] [--out DIR] [--fast]
#   --bin PATH  package this gpool binary (default: cargo build --release)
#   --out DIR   where the artefacts go (default: target/dist)
#   --fast      compress lightly (tests package a large debug binary)
# Needs dpkg-deb (every Debian has it), gzip, tar and sha256sum.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=""
out=target/dist
level=9
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --fast) level=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "scripts/package.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
[ -n "$version" ] || { echo "scripts/package.sh: no version in Cargo.toml" >&2; exit 1; }
if [ -z "$bin" ]; then
  cargo build --release --locked -p gpool-cli --bin gpool
  bin=target/release/gpool
fi
[ -x "$bin" ] || { echo "scripts/package.sh: $bin is not an executable gpool" >&2; exit 1; }
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# What both artefacts hold: the man pages and the completions, made by the binary itself.
"$bin" man "$stage/man" >/dev/null
gzip -9n "$stage"/man/*.1
mkdir -p "$stage/completions"
"$bin" completion bash >"$stage/completions/gpool.bash"
"$bin" completion zsh >"$stage/completions/_gpool"
"$bin" completion fish >"$stage/completions/gpool.fish"

# --- The Debian package -------------------------------------------------
root="$stage/deb"
install -D -m 0755 "$bin" "$root/usr/bin/gpool"
for unit in deploy/systemd/*.service; do
  name=$(basename "$unit")
  mkdir -p "$root/lib/systemd/system"
  sed 's|/usr/local/bin/gpool|/usr/bin/gpool|g' "$unit" >"$root/lib/systemd/system/$name"
  chmod 0644 "$root/lib/systemd/system/$name"
done
# Settings, one file per unit: mode 0600, as they may hold a token or a database password.
mkdir -p "$root/etc/default"
cat >"$root/etc/default/gpool-up" <<'EOF'
# gpool-up.service (one machine): flags of `gpool up`. Beyond loopback, use
# TLS (--tls) or say --insecure-http. See `man gpool-up`.
#GPOOL_UP_ARGS="--listen 0.0.0.0:7878 --tls"
GPOOL_UP_ARGS=""
EOF
cat >"$root/etc/default/gpool-serve" <<'EOF'
# gpool-serve.service (a control plane of a cluster). The database URL goes
# here, never in GPOOL_SERVE_ARGS (arguments are visible in /proc).
#GPOOL_DB=postgres://gpool:SECRET@db.internal:5432/gpool
#GPOOL_SERVE_ARGS="--listen 0.0.0.0:7878 --tls --tls-dir /var/lib/gpool/tls --tls-san cp1.internal"
GPOOL_SERVE_ARGS=""
EOF
cat >"$root/etc/default/gpool-agent" <<'EOF'
# gpool-agent.service (a GPU node of a cluster).
#GPOOL_SERVER=https://cp1.internal:7878,https://cp2.internal:7878
#GPOOL_TOKEN=<this node's own token: gpool token create --node --user node-a>
#GPOOL_AGENT_ARGS="--node-name node-a --ca-fingerprint sha256:<printed by gpool serve --tls>"
GPOOL_AGENT_ARGS=""
EOF
chmod 0600 "$root"/etc/default/gpool-*
install -D -m 0644 "$stage/completions/gpool.bash" "$root/usr/share/bash-completion/completions/gpool"
install -D -m 0644 "$stage/completions/_gpool" "$root/usr/share/zsh/vendor-completions/_gpool"
install -D -m 0644 "$stage/completions/gpool.fish" "$root/usr/share/fish/vendor_completions.d/gpool.fish"
mkdir -p "$root/usr/share/man/man1"
cp "$stage"/man/*.1.gz "$root/usr/share/man/man1/"
install -D -m 0644 README.md "$root/usr/share/doc/gpool/README.md"
cat >"$root/usr/share/doc/gpool/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: gpool
Source: https://github.com/gpool/gpool

Files: *
License: Apache-2.0
 On Debian systems, the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF
mkdir -p "$root/DEBIAN"
installed_kb=$(du -sk "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: gpool
Version: $version
Architecture: $arch
Maintainer: gpool developers <gpool@users.noreply.github.com>
Installed-Size: $installed_kb
Depends: libc6, adduser
Recommends: systemd
Suggests: podman | docker.io, postgresql
Section: admin
Priority: optional
Homepage: https://github.com/gpool/gpool
Description: GPU resource manager: queue, schedule, observe and account for shared GPUs
 gpool turns one GPU machine, or a fleet of them, into a shared, fair,
 observable, cost-aware pool: priorities, preemption, fair share, quotas,
 gang scheduling, MIG and GPU sharing, services, pipelines, Prometheus
 metrics with DCGM names, and a trace-replay simulator.
 .
 One machine: systemctl enable --now gpool-up. A cluster: gpool-serve on
 control-plane machines (PostgreSQL), gpool-agent on every GPU node.
EOF
printf '%s\n' /etc/default/gpool-up /etc/default/gpool-serve /etc/default/gpool-agent >"$root/DEBIAN/conffiles"
cat >"$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  # gpool serve runs as this account (gpool-serve.service); gpool up and the
  # agent run as root, which starts each job as its submitter.
  if ! getent passwd gpool >/dev/null; then
    adduser --system --group --home /var/lib/gpool --no-create-home --quiet gpool
  fi
  # The settings may hold secrets: private on first install (an upgrade keeps the admin's choice).
  if [ -z "$2" ]; then
    chmod 0600 /etc/default/gpool-up /etc/default/gpool-serve /etc/default/gpool-agent
  fi
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
    # An upgrade: running daemons take the new binary (jobs keep running and are re-adopted).
    if [ -n "$2" ]; then
      systemctl try-restart gpool-up.service gpool-serve.service gpool-agent.service >/dev/null || true
    fi
  fi
fi
exit 0
EOF
cat >"$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null || true
fi
# Removing keeps the state (jobs, tokens, accounting); purging deletes it.
if [ "$1" = purge ]; then
  rm -rf /var/lib/gpool /var/lib/gpool-agent
  if getent passwd gpool >/dev/null && command -v deluser >/dev/null; then
    deluser --quiet --system gpool >/dev/null || true
  fi
fi
exit 0
EOF
cat >"$root/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
# Removed: its daemons stop (jobs keep running, as on any stop of gpool; a
# reinstall re-adopts them). An upgrade restarts them in postinst instead.
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
  systemctl stop gpool-up.service gpool-serve.service gpool-agent.service >/dev/null 2>&1 || true
fi
exit 0
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm" "$root/DEBIAN/prerm"
deb="gpool_${version}_${arch}.deb"
if [ "$level" = 9 ]; then comp=(-Zxz); else comp=(-Zgzip -z1); fi
dpkg-deb --root-owner-group "${comp[@]}" --build "$root" "$out/$deb" >/dev/null

# --- The release archive -----------------------------------------------
name="gpool-$version-x86_64-linux"
dir="$stage/$name"
install -D -m 0755 "$bin" "$dir/bin/gpool"
mkdir -p "$dir/systemd" "$dir/completions" "$dir/man/man1"
cp deploy/systemd/*.service "$dir/systemd/"
cp "$stage"/completions/* "$dir/completions/"
cp "$stage"/man/*.1.gz "$dir/man/man1/"
cp README.md "$dir/"
cat >"$dir/INSTALL" <<'EOF'
install -m 0755 bin/gpool /usr/local/bin/gpool
install -m 0644 systemd/*.service /etc/systemd/system/ && systemctl daemon-reload
install -m 0644 man/man1/* /usr/local/share/man/man1/
install -m 0644 completions/gpool.bash /etc/bash_completion.d/gpool
systemctl enable --now gpool-up        # one machine; see README.md for a cluster
EOF
tar -C "$stage" --owner=0 --group=0 --numeric-owner --sort=name -cf - "$name" | gzip -"$level" -n >"$out/$name.tar.gz"

(cd "$out" && sha256sum "$deb" "$name.tar.gz" >SHA256SUMS)
echo "$out/$deb"
echo "$out/$name.tar.gz"
echo "$out/SHA256SUMS"
