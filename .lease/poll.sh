#!/bin/bash
# Usage: bash .lease/poll.sh <max seconds> <case>
# Waits until the job of bg.sh ends or <max seconds> pass, prints its state, and packs what it recorded into $OUT:
# case-data.tgz (the case's data folder in /tmp/repo, merged at the end of a run) and workers.tgz (the workers'
# folders and logs under /tmp, to merge by hand when the machine is lost before the end).
end=$((SECONDS + $1))
while [ ! -f /tmp/job.rc ] && [ $SECONDS -lt $end ]; do sleep 5; done
date -u +%H:%M:%S
if [ -f /tmp/job.rc ]; then echo "job exit $(cat /tmp/job.rc)"; else echo "job running"; fi
tail -n 15 /tmp/job.log
for log in /tmp/"$2"-parallel-*/gpus*.log; do [ -f "$log" ] && { echo "== $log"; tail -n 25 "$log"; }; done
nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
mkdir -p "$OUT"
tar -czf "$OUT/case-data.tgz" -C /tmp/repo "data/runs/$2" 2>/dev/null
(cd /tmp && tar -czf "$OUT/workers.tgz" "$2"-parallel-* 2>/dev/null)
ls -la "$OUT"
