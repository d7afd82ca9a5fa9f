#!/usr/bin/env bash
# pgbench against PostgreSQL directly, pgbouncer in transaction mode, and
# the gateway's PostgreSQL port, with one script, at 1, 16 and 64 clients
# (docs/benchmarks.md, "The PostgreSQL port"). Starts a throwaway
# PostgreSQL (fsync on: PostgreSQL's default durability; FSYNC=off to
# change it), pgbouncer and a gateway from BUILD (default build-rel), and
# removes them when done. Run as root (PostgreSQL runs as postgres).
# Usage: bash bench/pgbench_compare.sh [seconds per run, default 10]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-rel}
FENCECTL=${FENCECTL:-$BUILD/tools/fencectl/fencectl}
SECONDS_PER_RUN=${1:-10}
FSYNC=${FSYNC:-on}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
DIR=$(mktemp -d /tmp/pgbench-compare.XXXXXX)
chown postgres "$DIR"
PG_PORT=$((20000 + RANDOM % 10000)); BOUNCER_PORT=$((PG_PORT + 1)); GW_PORT=$((PG_PORT + 2))
cleanup() {
  [ -f "$DIR/gw.pid" ] && kill "$(cat "$DIR/gw.pid")" 2>/dev/null || true
  [ -f "$DIR/pgbouncer.pid" ] && kill "$(cat "$DIR/pgbouncer.pid")" 2>/dev/null || true
  su postgres -c "$PGBIN/pg_ctl -D $DIR/data -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
su postgres -c "$PGBIN/initdb -D $DIR/data -U postgres --auth=trust -E UTF8" >/dev/null
su postgres -c "$PGBIN/pg_ctl -D $DIR/data -l $DIR/pg.log -w -o '-p $PG_PORT -k $DIR -c listen_addresses=127.0.0.1 -c fsync=$FSYNC -c max_connections=200' start" >/dev/null
PSQL="psql -X -q -h 127.0.0.1 -p $PG_PORT -U postgres -d postgres"
$PSQL -c "CREATE ROLE fencegate_worker LOGIN; CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
          INSERT INTO accounts (id) SELECT g FROM generate_series(1, 10000) g; GRANT SELECT, UPDATE ON accounts TO fencegate_worker"
"$FENCECTL" pg-setup --admin_dsn="postgres://postgres@127.0.0.1:$PG_PORT/postgres" --role=fencegate_worker --revoke_session_functions >/dev/null
cat > "$DIR/pgbouncer.ini" <<INI
[databases]
postgres = host=127.0.0.1 port=$PG_PORT dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir = $DIR
auth_type = trust
auth_file = $DIR/users.txt
pool_mode = transaction
default_pool_size = 32
max_client_conn = 200
pidfile = $DIR/pgbouncer.pid
logfile = $DIR/pgbouncer.log
INI
echo '"postgres" ""' > "$DIR/users.txt"
chown -R postgres "$DIR"
su postgres -c "/usr/sbin/pgbouncer -d $DIR/pgbouncer.ini"
"$BUILD/gateway/fencegate" --data_dir="$DIR/gw" --listen=127.0.0.1:0 \
  --route="db=postgres://fencegate_worker@127.0.0.1:$PG_PORT/postgres?pool_size=32" \
  --pg_listen="127.0.0.1:$GW_PORT" --pg_max_connections=200 2>"$DIR/gw.log" &
echo $! > "$DIR/gw.pid"
sleep 2
printf '\\set id random(1, 10000)\nUPDATE accounts SET balance = balance + 1 WHERE id = :id;\n' > "$DIR/update.sql"
run() {  # target port options database mode clients
  local out="$DIR/run.out"
  if ! PGOPTIONS="$3" pgbench -n -h 127.0.0.1 -p "$2" -U postgres -d "$4" -M "$5" \
      -c "$6" -j 2 -T "$SECONDS_PER_RUN" -f "$DIR/update.sql" >"$out" 2>&1; then
    printf '%-10s %-9s %3s  failed: %s\n' "$1" "$5" "$6" "$(grep -m1 -i error "$out")"
    return 0
  fi
  awk -v t="$1" -v m="$5" -v c="$6" '/latency average/ {lat=$4} /^tps/ {tps=$3}
      END {printf "%-10s %-9s %3s  tps %8.0f  latency avg ms %s\n", t, m, c, tps, lat}' "$out"
}
echo "pgbench, ${SECONDS_PER_RUN}s per run, fsync=$FSYNC"
for clients in 1 16 64; do
  for mode in simple extended prepared; do
    run direct "$PG_PORT" "" postgres "$mode" "$clients"
    run pgbouncer "$BOUNCER_PORT" "" postgres "$mode" "$clients"
    run port "$GW_PORT" "-c fencegate.domain=pgbench -c fencegate.token=1" db "$mode" "$clients"
  done
done
