#!/usr/bin/env bash
# Stops what deploy/ha/start.sh DIR started, newest first.
set -uo pipefail
dir="${1:?usage: stop.sh DIR}"
stop() { [[ -f "$1" ]] && kill -TERM "$(cat "$1")" 2>/dev/null; }
stop "$dir/haproxy.pid"
for node in 2 1; do stop "$dir/node$node/patroni.pid"; done
for _ in $(seq 100); do pgrep -f "$dir/node" >/dev/null || break; sleep 0.1; done
pkill -KILL -f "$dir/node" 2>/dev/null
stop "$dir/etcd.pid"
for _ in $(seq 50); do pgrep -f "$dir/etcd" >/dev/null || break; sleep 0.1; done
pkill -KILL -f "$dir/etcd" 2>/dev/null
exit 0
