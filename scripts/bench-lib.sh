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
