#!/bin/bash
# Usage: bash .lease/poll.sh <max seconds> <case>
# Waits until the job of .lease/bg.sh ends or <max seconds> pass, prints its state and the logs' tails, and packs
# what it recorded into $OUT: case-data.tgz (data/runs/<case> of the job's copy of the tree, where the parallel
# runner merges at the end) and workers.tgz (the workers' folders and logs, to merge by hand with
# vllm_playbooks.parallel.merge_into when the machine is lost before the end). The machine goes back after about 30 s
# without a device call: call the next poll as soon as this one returns. On a machine where no job was started (a
# fresh one: the job was lost with the last) it exits 3 at once instead of waiting.
set -uo pipefail
root=${LEASE_TMP:-/tmp}
if [ ! -f "$root/job.pid" ]; then
  # A fresh machine (the last one went back, and its job with it): waiting would only spend device time.
  echo "no job on this machine: it was started fresh, and the job of .lease/bg.sh went back with the last one" >&2
  exit 3
fi
end=$((SECONDS + $1))
while [ ! -f "$root/job.rc" ] && [ $SECONDS -lt $end ]; do sleep 1; done
date -u +%H:%M:%S
if [ -f "$root/job.rc" ]; then echo "job exit $(cat "$root/job.rc")"; else echo "job running"; fi
tail -n 15 "$root/job.log"
for log in "$root/$2"-parallel-*/gpus*.log; do [ -f "$log" ] && { echo "== $log"; tail -n 25 "$log"; }; done
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
fi
mkdir -p "$OUT"
tar -czf "$OUT/case-data.tgz" -C "$root/repo" "data/runs/$2"
shopt -s nullglob
workers=("$root/$2"-parallel-*)
[ ${#workers[@]} -gt 0 ] && tar -czf "$OUT/workers.tgz" -C "$root" "${workers[@]#"$root/"}"
ls -l "$OUT"
