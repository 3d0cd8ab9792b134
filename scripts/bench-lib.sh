# Helpers shared by the benchmark scripts (sourced, not run).

# Installs the Debian packages named that are missing, without starting the services they ship
# (redis-server, postgresql): the scripts start their own servers on free loopback ports.
need() {
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing ${missing[*]}" >&2
        install_without_services "${missing[@]}"
    fi
}

# The Redis baseline the HTTP benchmarks compare stockd with: the seeds' check-and-deduct of
# one key, as users write it by hand (EVALSHA ... 1 stock 1).
# shellcheck disable=SC2034 # used by the scripts that source this file
REDIS_CHECK_AND_DEDUCT_LUA="local s = tonumber(redis.call('GET', KEYS[1])) if s and s >= tonumber(ARGV[1]) then redis.call('DECRBY', KEYS[1], ARGV[1]) return 1 end return 0"

# A free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits (10 s at most) until the URL answers 2xx.
wait_http() { for _ in $(seq 1 200); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "not ready: $1" >&2; return 1; }

# Installs Debian packages without starting the services they ship (a policy-rc.d that says no,
# added only for the install when none is there): tests start their own servers on free ports.
install_without_services() {
    local sudo_cmd="" policy_added=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo_cmd tee /usr/sbin/policy-rc.d >/dev/null
        $sudo_cmd chmod +x /usr/sbin/policy-rc.d
        policy_added=1
    fi
    $sudo_cmd apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "$@" >/dev/null
    [ -z "$policy_added" ] || $sudo_cmd rm -f /usr/sbin/policy-rc.d
}

# A debug `stockd serve` for a check script: STOCKD_WORK is a temporary directory (removed on
# exit, with the server stopped first); `start_debug_stockd [serve flags...]` builds nothing,
# starts target/debug/stockd on a free loopback port with its data and log there, sets
# STOCKD_BASE and waits until it answers (its log on stderr if it does not).
STOCKD_WORK=""
STOCKD_PID=""
stop_debug_stockd() {
    if [ -n "$STOCKD_PID" ]; then
        kill "$STOCKD_PID" 2>/dev/null || true
        wait "$STOCKD_PID" 2>/dev/null || true
    fi
    [ -z "$STOCKD_WORK" ] || rm -rf "$STOCKD_WORK"
}
start_debug_stockd() {
    STOCKD_WORK=$(mktemp -d)
    trap stop_debug_stockd EXIT
    local port; port=$(free_port)
    STOCKD_BASE="http://127.0.0.1:$port"
    target/debug/stockd serve --listen "127.0.0.1:$port" --data-dir "$STOCKD_WORK/data" "$@" \
        >"$STOCKD_WORK/stockd.log" 2>&1 &
    STOCKD_PID=$!
    wait_http "$STOCKD_BASE/healthz" || { cat "$STOCKD_WORK/stockd.log" >&2; return 1; }
}
