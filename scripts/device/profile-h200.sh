#!/usr/bin/env bash
# `gpool profile` on a real GPU (BENCHMARKS.md, "On a real GPU: a lent
# H200"). Run on the device machine from the repository root, with a
# stripped release `gpool` and py-spy's static binary carried there (it has
# no network):
#   cargo build --release --bin gpool && strip -o target/gpool target/release/gpool
#   pip download py-spy --no-deps -d target/   # the manylinux wheel; its bin/py-spy is static
# Under `gpool up` with the NVML backend, three PyTorch loops run one at a
# time, each profiled for 5 s (and the first and last again with
# --native); the verdicts and captures land in $OUT (or ./profiles).
# Recreated in the repository from the steps of the 2026-11-26 run.
set -euo pipefail
GPOOL=${GPOOL:-./target/gpool}
PYSPY=${PYSPY:-$(command -v py-spy || echo ./target/py-spy)}
OUT=${OUT:-./profiles}
PY=${PY:-python3}
mkdir -p "$OUT"
dir=$(mktemp -d)
trap 'kill $up 2>/dev/null || true; rm -rf "$dir"' EXIT
PATH="$(dirname "$PYSPY"):$PATH" "$GPOOL" up --gpu-backend nvml --data-dir "$dir" --listen 127.0.0.1:0 >"$dir/up.log" 2>&1 &
up=$!
until [ -s "$dir/server.url" ]; do sleep 0.2; done
export GPOOL_SERVER=$(cat "$dir/server.url") GPOOL_TOKEN=$(cat "$dir/admin.token")

cat >"$dir/input_bound.py" <<'PY'
import time, torch
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self): return 10**9
    def __getitem__(self, i):
        time.sleep(0.0005)
        return torch.randn(512)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x in DataLoader(Slow(), batch_size=256, num_workers=0):
    loss = model(x.cuda()).sum(); opt.zero_grad(); loss.backward(); opt.step()
PY
cat >"$dir/matmul.py" <<'PY'
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
step = 0
while True:
    for _ in range(20):
        b = a @ a
    step += 1
    if step % 50 == 0:
        torch.cuda.synchronize()
PY
cat >"$dir/item.py" <<'PY'
import torch
x = torch.randn(512, 512, device="cuda")
while True:
    (x @ x).relu().sum().item()
PY

profile() { # NAME SCRIPT [--native]
  local name=$1 script=$2 id
  shift 2
  id=$("$GPOOL" submit --gpus 1 --name "$name" -- "$PY" "$script")
  until "$GPOOL" show "$id" -o json | grep -q '"running"'; do sleep 0.5; done
  sleep 10 # past start-up
  "$GPOOL" profile "$id" --seconds 5 --save "$OUT/$name" "$@" | tee "$OUT/$name.txt"
  "$GPOOL" cancel "$id" >/dev/null
}
profile input-bound "$dir/input_bound.py"
profile input-bound-native "$dir/input_bound.py" --native
profile matmul "$dir/matmul.py"
profile item "$dir/item.py"
profile item-native "$dir/item.py" --native
echo "verdicts and captures in $OUT"
