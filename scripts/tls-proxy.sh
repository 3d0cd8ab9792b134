#!/usr/bin/env bash
# Runs the TLS example of docs/security.md (docs/examples/nginx-tls.conf) for real: a stockd
# server with tokens on loopback, nginx with that config (ports, certificate and runtime paths
# replaced) in front of it with a certificate of a test CA made here, and requests through it
# over HTTPS: health, a pool written with the admin token, a hold with the client token, a
# refusal without a token, and plain HTTP refused on the TLS port. Then stockd's own clients
# over https://, trusting the test CA through SSL_CERT_FILE (docs/cli.md): the CLI (and its
# refusal of the certificate without it), a short `stockd bench run`, and `stockd sink postgres
# --once` into a private PostgreSQL. Everything listens on 127.0.0.1.
# Installs nginx, openssl and PostgreSQL from Debian's packages when missing (without starting
# the packaged services). Usage: scripts/tls-proxy.sh (builds the debug binary if needed).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

if ! command -v nginx >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
    echo "== installing nginx (the packaged service is not started)"
    install_without_services nginx-light openssl
fi
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"

cargo build -q -p stockd --bin stockd
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

ADMIN="admin-$(openssl rand -hex 12)"
CLIENT="client-$(openssl rand -hex 12)"
STOCKD_PORT=$(free_port)
STOCKD_LOG=warn STOCKD_TOKENS="admin:$ADMIN,client:$CLIENT" target/debug/stockd serve \
    --listen "127.0.0.1:$STOCKD_PORT" --data-dir "$WORK/data" &
PIDS+=($!)
wait_http "http://127.0.0.1:$STOCKD_PORT/healthz"

# A test CA, and a certificate for "localhost" that it signs (a server certificate, not a CA:
# rustls, like browsers, refuses a CA certificate as the server's own).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj "/CN=stockd test CA" -keyout "$WORK/ca-key.pem" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
    -keyout "$WORK/privkey.pem" -out "$WORK/server.csr" 2>/dev/null
printf '%s\n' "subjectAltName=DNS:localhost" "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" > "$WORK/server.ext"
openssl x509 -req -in "$WORK/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca-key.pem" \
    -CAcreateserial -days 1 -extfile "$WORK/server.ext" -out "$WORK/fullchain.pem" 2>/dev/null

TLS_PORT=$(free_port)
mkdir -p "$WORK/nginx/logs"
sed -e "s|^pid .*|pid $WORK/nginx/nginx.pid;|" \
    -e "s|^error_log .*|error_log $WORK/nginx/logs/error.log warn;|" \
    -e "s|server 127.0.0.1:7070;|server 127.0.0.1:$STOCKD_PORT;|" \
    -e "s|listen 443 ssl;|listen 127.0.0.1:$TLS_PORT ssl;|" \
    -e "s|/etc/ssl/stockd/fullchain.pem|$WORK/fullchain.pem|" \
    -e "s|/etc/ssl/stockd/privkey.pem|$WORK/privkey.pem|" \
    -e "s|^worker_processes auto;|worker_processes 1;|" \
    -e "s|worker_connections 8192;|worker_connections 256;|" \
    docs/examples/nginx-tls.conf > "$WORK/nginx/nginx.conf"
# Every line the script rewrites must have been found: the example and this script stay in step.
for expected in "$WORK/nginx/nginx.pid" "127.0.0.1:$STOCKD_PORT" "127.0.0.1:$TLS_PORT ssl" \
    "$WORK/fullchain.pem" "$WORK/privkey.pem"; do
    grep -qF "$expected" "$WORK/nginx/nginx.conf" || {
        echo "docs/examples/nginx-tls.conf changed: cannot place $expected" >&2
        exit 1
    }
done
# Temporary files under the work directory; as root, workers run as root too so they can use it.
extra="client_body_temp_path $WORK/nginx/body; proxy_temp_path $WORK/nginx/proxy;"
extra="$extra fastcgi_temp_path $WORK/nginx/f; uwsgi_temp_path $WORK/nginx/u; scgi_temp_path $WORK/nginx/s;"
sed -i "s|^http {|http {\n    $extra|" "$WORK/nginx/nginx.conf"
user_directive=""
[ "$(id -u)" -ne 0 ] || user_directive="user root;"
"$NGINX" -t -q -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g "daemon off; $user_directive"
"$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g "daemon off; $user_directive" &
PIDS+=($!)

BASE="https://localhost:$TLS_PORT"
CURL=(curl -sS --cacert "$WORK/ca.pem" --resolve "localhost:$TLS_PORT:127.0.0.1")
for _ in $(seq 1 100); do
    "${CURL[@]}" -o /dev/null "$BASE/healthz" 2>/dev/null && break
    sleep 0.05
done

fail() { echo "tls-proxy: $*" >&2; exit 1; }
expect() { # NAME EXPECTED_STATUS curl args...
    local name="$1" want="$2"; shift 2
    local got
    got=$("${CURL[@]}" -o "$WORK/body" -w '%{http_code}' "$@")
    [ "$got" = "$want" ] || fail "$name: got $got, want $want: $(cat "$WORK/body")"
    echo "   $name: $got"
}
echo "== through nginx over TLS (https://localhost:$TLS_PORT -> 127.0.0.1:$STOCKD_PORT)"
expect "health" 200 "$BASE/healthz"
expect "no token" 401 "$BASE/v1/pools"
expect "client may not write pools" 403 -X PUT -H "Authorization: Bearer $CLIENT" \
    -d '{"total": 3}' "$BASE/v1/pools/tls-pool"
expect "admin writes a pool" 201 -X PUT -H "Authorization: Bearer $ADMIN" \
    -d '{"total": 3}' "$BASE/v1/pools/tls-pool"
expect "client holds" 201 -X POST -H "Authorization: Bearer $CLIENT" \
    -d '{"hold_id": "tls-1", "items": [{"pool": "tls-pool", "qty": 1}], "confirm": true}' \
    "$BASE/v1/holds"
expect "client holds again (same hold_id)" 200 -X POST -H "Authorization: Bearer $CLIENT" \
    -d '{"hold_id": "tls-1", "items": [{"pool": "tls-pool", "qty": 1}], "confirm": true}' \
    "$BASE/v1/holds"
"${CURL[@]}" -H "Authorization: Bearer $CLIENT" "$BASE/v1/pools/tls-pool" > "$WORK/pool"
python3 - "$WORK/pool" <<'PY' || fail "pool after the holds: $(cat "$WORK/pool")"
import json, sys
p = json.load(open(sys.argv[1]))
assert (p["total"], p["available"], p["held"], p["sold"]) == (3, 2, 0, 1), p
PY
echo "   pool: total 3, sold 1, available 2"
# Plain HTTP on the TLS port is refused by nginx (400), and never reaches stockd.
plain=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$TLS_PORT/healthz" || true)
[ "$plain" = "400" ] || fail "plain HTTP on the TLS port: got $plain, want 400"
echo "   plain HTTP on the TLS port: $plain"

# stockd's own clients over https://, trusting the test CA as a user would: SSL_CERT_FILE.
echo "== stockd's clients through nginx over TLS, trusting the test CA (SSL_CERT_FILE)"
STOCKD=target/debug/stockd
export SSL_CERT_FILE="$WORK/ca.pem"
out=$("$STOCKD" pool get tls-pool --url "$BASE" --token "$CLIENT" 2>&1) \
    || fail "stockd pool get over https: $out"
[ "$out" = "pool tls-pool: total 3, available 2, held 0, sold 1" ] \
    || fail "stockd pool get over https: $out"
echo "   stockd pool get: $out"
out=$("$STOCKD" hold reserve tls-2 --item tls-pool=1 --url "$BASE" --token "$CLIENT" 2>&1) \
    || fail "stockd hold reserve over https: $out"
case "$out" in "hold tls-2: held, expires "*) ;; *) fail "stockd hold reserve over https: $out" ;; esac
echo "   stockd hold reserve: ${out%%,*}"
# Without the CA the certificate is refused: exit 3, and the hint says what to set.
set +e
out=$(SSL_CERT_FILE=/dev/null "$STOCKD" pool get tls-pool --url "$BASE" --token "$CLIENT" 2>&1)
code=$?
set -e
[ "$code" = 3 ] && [[ "$out" == *"SSL_CERT_FILE"* ]] \
    || fail "an untrusted certificate: exit $code: $out"
echo "   an untrusted certificate: exit $code, with a hint naming SSL_CERT_FILE"
"$STOCKD" bench run --scenario flash --url "$BASE" --token "$ADMIN" --duration 1s \
    --warmup 0s --connections 4 --stock 200 --quiet > "$WORK/bench.txt" 2>&1 \
    || fail "stockd bench run over https: $(cat "$WORK/bench.txt")"
echo "   stockd bench run --scenario flash (1 s, 4 connections): verdict passed"

# The sink into a private PostgreSQL (initdb in the work directory, a free port).
PG_INITDB="$(command -v initdb 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1)"
if [ -z "$PG_INITDB" ]; then
    echo "== installing PostgreSQL (the packaged service is not started)"
    install_without_services postgresql
    PG_INITDB="$(ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)"
fi
PG_BIN=$(dirname "$(readlink -f "$PG_INITDB")")
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
mkdir -p "$WORK/pg"
if [ "$(id -u)" -eq 0 ]; then
    chmod o+x "$WORK" # the postgres user passes through to its own directory, and no further
    chown postgres "$WORK/pg"
fi
as_postgres "$PG_BIN/initdb" -D "$WORK/pg/data" -U postgres --auth=trust --locale=C -E UTF8 \
    --no-sync >/dev/null
PG_PORT=$(free_port)
as_postgres "$PG_BIN/postgres" -D "$WORK/pg/data" -h 127.0.0.1 -p "$PG_PORT" -k "$WORK/pg" \
    >"$WORK/pg.log" 2>&1 &
PIDS+=($!)
stop_postgres() { # the postmaster itself: the PID above may be runuser's
    local postmaster
    postmaster=$(head -n 1 "$WORK/pg/data/postmaster.pid" 2>/dev/null || true)
    [ -z "$postmaster" ] || kill -QUIT "$postmaster" 2>/dev/null || true
}
trap 'stop_postgres; cleanup' EXIT
for _ in $(seq 1 200); do "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && break; sleep 0.05; done
DSN="host=127.0.0.1 port=$PG_PORT user=postgres dbname=postgres"
"$STOCKD" sink postgres --once --url "$BASE" --token "$CLIENT" --dsn "$DSN" > "$WORK/sink.txt" 2>&1 \
    || fail "stockd sink postgres over https: $(cat "$WORK/sink.txt")"
sold=$(as_postgres "$PG_BIN/psql" -At -h 127.0.0.1 -p "$PG_PORT" -U postgres \
    -c "SELECT sold FROM stockd_pools WHERE pool = 'tls-pool'")
[ "$sold" = 1 ] || fail "the sink's stockd_pools after reading over https: sold '$sold', want 1"
echo "   stockd sink postgres --once: tls-pool in stockd_pools, sold 1"
echo "tls-proxy: ok"
