#!/bin/bash
# Usage (on the lent GPU machine, after device-env.sh): bash .lease/bg.sh <commit sha> "<command>"
# Copies the synced tree to $LEASE_TMP/repo (default /tmp/repo; the sync of a later device call cannot touch it) and
# starts <command> there, detached, with VLLM_PLAYBOOKS_GIT_SHA=<commit> (the rows' git_sha: the machine gets no .git)
# and TMPDIR=$LEASE_TMP (where vllm_playbooks.parallel puts its workers). $LEASE_TMP/job.log gets the command's
# output, $LEASE_TMP/job.rc its exit status once it ends, $LEASE_TMP/job.pid its process group (stop the job with
# kill -INT -- -$(cat $LEASE_TMP/job.pid): the parallel runner keeps what finished). Poll it with .lease/poll.sh.
set -euo pipefail
sha=$1
command=$2
root=${LEASE_TMP:-/tmp}
rm -rf "$root/repo" "$root/job.rc" "$root/job.log" "$root/job.pid"
mkdir -p "$root/repo"
tar --exclude=./.gpu --exclude=./.venv -cf - . | tar -xf - -C "$root/repo"
cd "$root/repo"
export VLLM_PLAYBOOKS_GIT_SHA="$sha" TMPDIR="$root"
setsid nohup bash -c "$command; echo \$? > '$root/job.rc'" > "$root/job.log" 2>&1 < /dev/null &
echo $! > "$root/job.pid"
for _ in 1 2 3 4 5; do [ -f "$root/job.rc" ] && break; sleep 1; done
echo "started in $root/repo at $(date -u +%H:%M:%S) (sha $sha)"
tail -n 5 "$root/job.log"
