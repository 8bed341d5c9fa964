# Sourced by this folder's side-by-side scripts (from the repository root): `free_port`, and
# `start PORT COMMAND...`, which runs a server on core 0 and waits until its port accepts; every
# server started is killed when the script exits. `$target` is the release build's folder.
target=${CARGO_TARGET_DIR:-target}/release
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
start() { # port, command...
  local port=$1; shift
  taskset -c 0 "$@" &
  pids+=($!)
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && return; sleep 0.05; done
  echo "server on port $port did not start: $*" >&2; exit 1
}
