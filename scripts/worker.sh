#!/usr/bin/env bash
# An RQ worker that comes back by itself: `make worker` (or scripts/worker.sh [rqworker args]).
#
# RQ workers exit (rc 1) when Redis goes away. This loop starts `manage.py rqworker
# --with-scheduler default` again after each exit, waiting 1, 2, 4 ... up to 30 seconds
# between attempts (back to 1 s after a worker that lived a minute). SIGTERM or Ctrl-C is
# passed to the worker (RQ's warm shutdown: its run goes back to the queue) and ends the loop.
# In production use your process manager's restart policy instead (README, "Security").
set -u
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(default)
child=
stop() {
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child"
  exit 0
}
trap stop TERM INT
delay=1
while true; do
  started=$(date +%s)
  "$py" manage.py rqworker --with-scheduler "${args[@]}" &
  child=$!
  wait "$child"
  rc=$?
  child=
  if [ $(( $(date +%s) - started )) -ge 60 ]; then delay=1; fi
  echo "worker.sh: rqworker exited with status $rc; starting it again in ${delay}s" >&2
  sleep "$delay" &
  wait $!
  delay=$(( delay * 2 > 30 ? 30 : delay * 2 ))
done
