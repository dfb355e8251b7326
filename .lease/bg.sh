#!/bin/bash
# Usage (on the device, after device-env.sh): bash .lease/bg.sh <commit sha> "<command>"
# Copies the synced tree to /tmp/repo (the sync of a later call cannot touch it) and starts <command> there in the
# background, detached; /tmp/job.log gets its output and /tmp/job.rc its exit status.
set -euo pipefail
sha=$1; shift
rm -rf /tmp/repo /tmp/job.rc /tmp/job.log
mkdir -p /tmp/repo
tar --exclude=./.gpu --exclude=./.venv -cf - . | tar -xf - -C /tmp/repo
cd /tmp/repo
export VLLM_PLAYBOOKS_GIT_SHA="$sha"
setsid nohup bash -c "$1; echo \$? > /tmp/job.rc" > /tmp/job.log 2>&1 < /dev/null &
sleep 5
echo "started in /tmp/repo at $(date -u +%H:%M:%S) (sha $sha)"; tail -5 /tmp/job.log
