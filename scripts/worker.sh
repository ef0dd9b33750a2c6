#!/usr/bin/env bash
# A worker that comes back by itself: `make worker [WORKER=agent_worker]`, or
# scripts/worker.sh [rqworker|agent_worker] [worker args, e.g. queues or --concurrency 50].
#
# Both workers ride out a Redis outage by themselves; this loop is for everything else that
# ends a process (a crash, an out-of-memory kill, a bug). It starts `manage.py <worker>
# --with-scheduler <args>` (default: `rqworker --with-scheduler default`) again after each exit,
# waiting 1, 2, 4 ... up to 30 seconds between attempts (back to 1 s after a worker that lived a
# minute). SIGTERM or Ctrl-C is passed to the worker (a warm shutdown: its runs go back to the
# queue) and ends the loop. In production use your process manager's restart policy instead
# (README, "Supervise workers").
set -u
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
command=rqworker
case "${1:-}" in
  rqworker | agent_worker) command=$1; shift ;;
esac
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
  "$py" manage.py "$command" --with-scheduler "${args[@]}" &
  child=$!
  wait "$child"
  rc=$?
  child=
  if [ $(( $(date +%s) - started )) -ge 60 ]; then delay=1; fi
  echo "worker.sh: $command exited with status $rc; starting it again in ${delay}s" >&2
  sleep "$delay" &
  wait $!
  delay=$(( delay * 2 > 30 ? 30 : delay * 2 ))
done
