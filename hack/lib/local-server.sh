# Sourced by the scripts that start a throwaway `flowline operator` or `flowline api`
# on loopback against the local control plane (serve-flowline.sh, console-test.sh).

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_ready PORT PID LOG: until http://127.0.0.1:PORT/readyz answers 2xx. Fails,
# printing LOG, when the process PID exits first or 30 s pass.
wait_ready() {
  local port=$1 pid=$2 log=$3
  for _ in $(seq 150); do
    curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; return 1; }
    sleep 0.2
  done
  echo "http://127.0.0.1:$port/readyz did not answer within 30 s" >&2
  cat "$log" >&2
  return 1
}
