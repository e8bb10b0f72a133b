#!/usr/bin/env bash
# The supply chain, checked: `cargo deny check` (advisories, licences,
# bans, sources; deny.toml says what is allowed and why) without a network,
# against the RustSec snapshot in deny/ (deny/README.md).
#
#   scripts/deny.sh                     check (builds cargo-deny into target/tools once)
#   scripts/deny.sh --refresh CHECKOUT  take a new snapshot from an advisory-db clone
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.20.2
snapshot=deny/advisory-db.tar.gz

if [ "${1:-}" = "--refresh" ]; then
  src="${2:?usage: scripts/deny.sh --refresh PATH/TO/advisory-db}"
  commit=$(git -C "$src" rev-parse HEAD)
  date=$(git -C "$src" show -s --format=%cI HEAD)
  git -C "$src" archive --format=tar.gz -o "$PWD/$snapshot" HEAD crates
  sed -i "s/^    commit .*/    commit $commit/; s/^    date .*/    date $date/" deny/README.md
  echo "snapshot of $commit ($date) in $snapshot"
  exit 0
fi

deny=""
if command -v cargo-deny >/dev/null 2>&1 && cargo-deny --version | grep -q " $version"; then
  deny=cargo-deny
elif [ -x target/tools/bin/cargo-deny ]; then
  deny=target/tools/bin/cargo-deny
else
  echo "== building cargo-deny $version into target/tools (once; crates.io)"
  cargo install cargo-deny --version "$version" --locked --root target/tools --quiet
  deny=target/tools/bin/cargo-deny
fi

# cargo-deny looks for the database named by deny.toml's db-urls in a
# folder named by that URL's hash, as a git checkout. Its staleness check
# (deny.toml's maximum-db-staleness) takes the later of the last commit's
# date and the time .git/HEAD was written: both are set to the snapshot's.
date=$(sed -n 's/^    date //p' deny/README.md)
db=target/deny/advisory-dbs/advisory-db-3157b0e258782691
if [ ! -f "$db/.snapshot" ] || ! cmp -s "$db/.snapshot" "$snapshot"; then
  rm -rf "$db"
  mkdir -p "$db"
  tar -xzf "$snapshot" -C "$db"
  git -C "$db" init -q
  git -C "$db" add -A
  GIT_AUTHOR_DATE="$date" GIT_COMMITTER_DATE="$date" \
    git -C "$db" -c user.name=gpool -c user.email=ci@gpool.invalid commit -qm "RustSec snapshot of $date"
  touch -d "$date" "$db/.git/HEAD"
  cp "$snapshot" "$db/.snapshot"
fi
echo "== cargo deny (advisories as of $date, licences, bans, sources)"
"$deny" --offline check
