#!/bin/bash
# Usage: bash tools/run-detached.sh <folder> <command> [argument ...]
#   e.g. bash tools/run-detached.sh /tmp/pp vllm-playbooks run --case pp-27462 --gpus 0,1 --time-limit-s 3000
# Starts <command> in the current directory, detached from this terminal (it keeps running when you log out), and
# returns at once. <folder> receives run.log (the command's output), run.pid (its process group: stop the run with
# kill -INT -- -$(cat <folder>/run.pid), which keeps every finished point), run.rc (its exit status, once it ends)
# and data_dir (the data folder it records into). TMPDIR is set to <folder>, so the workers of `vllm-playbooks run`
# (<case>-parallel-*/) go there too. Follow the run with tools/wait-for-run.sh.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 <folder> <command> [argument ...]" >&2
  exit 2
fi
folder=$(mkdir -p "$1" && cd "$1" && pwd)
shift
if [ -f "$folder/run.pid" ] && [ ! -f "$folder/run.rc" ] && kill -0 -- "-$(cat "$folder/run.pid")" 2> /dev/null; then
  echo "a run is still going in $folder (process group $(cat "$folder/run.pid")): use another folder" >&2
  exit 2
fi
rm -f "$folder/run.log" "$folder/run.rc" "$folder/run.pid"
data=$(realpath -m "${VLLM_PLAYBOOKS_DATA_DIR:-data}")
echo "$data" > "$folder/data_dir"
export TMPDIR="$folder"
# bash -c runs the command with its arguments as given ("$@"), then writes its exit status.
setsid nohup bash -c '"$@"; echo $? > "$TMPDIR/run.rc"' run "$@" > "$folder/run.log" 2>&1 < /dev/null &
echo $! > "$folder/run.pid"
echo "started at $(date -u +%H:%M:%S) UTC in $PWD: $*"
echo "log: $folder/run.log; follow it with: bash tools/wait-for-run.sh $folder <seconds> <case>"
