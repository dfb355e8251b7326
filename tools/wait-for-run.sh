#!/bin/bash
# Usage: bash tools/wait-for-run.sh <folder> <max seconds> <case>
# Waits until the run that tools/run-detached.sh started in <folder> ends, or <max seconds> pass, then prints whether
# it finished (with its exit status), the tail of its log and of each worker's log, and packs what the case has
# recorded so far into <folder>: <case>-data.tgz (runs/<case> of the data folder the run records into) and, while
# `vllm-playbooks run` has workers, <case>-workers.tgz (their folders, with the points each finished before the
# merge at the end; vllm_playbooks.run.parallel.merge_into merges such a folder by hand). Exits 0 once it has
# printed the state (finished or still running), 3 when no run was started in <folder>.
set -uo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 <folder> <max seconds> <case>" >&2
  exit 2
fi
folder=${1%/}
case=$3
if [ ! -f "$folder/run.pid" ]; then
  echo "no run was started in $folder (tools/run-detached.sh writes run.pid there)" >&2
  exit 3
fi
end=$((SECONDS + $2))
while [ ! -f "$folder/run.rc" ] && [ $SECONDS -lt "$end" ]; do sleep 1; done
echo "$(date -u +%H:%M:%S) UTC"
if [ -f "$folder/run.rc" ]; then echo "run finished, exit $(cat "$folder/run.rc")"; else echo "run still running"; fi
tail -n 15 "$folder/run.log"
shopt -s nullglob
workers=("$folder/$case"-parallel-*)
for worker in "${workers[@]}"; do
  for log in "$worker"/gpus*.log; do echo "== $log"; tail -n 25 "$log"; done
done
data=$(cat "$folder/data_dir")
if [ -d "$data/runs/$case" ]; then
  tar -czf "$folder/$case-data.tgz" -C "$data" "runs/$case" && echo "packed $folder/$case-data.tgz"
else
  echo "nothing recorded yet in $data/runs/$case"
fi
if [ ${#workers[@]} -gt 0 ]; then
  tar -czf "$folder/$case-workers.tgz" -C "$folder" "${workers[@]#"$folder/"}" && echo "packed $folder/$case-workers.tgz"
fi
exit 0
