#!/usr/bin/env bash
# The PostgreSQL part of the demo (scripts/demo.sh): a throwaway PostgreSQL
# in a temporary directory, a gateway serving it as route "db" on the
# PostgreSQL port, and a worker's psql pointed at that port: its session
# with token N updates a row, the next holder fences N+1, and the old
# holder's next transaction is refused. Stops both servers and removes the
# directory when done.
# Skipped (exit 0) without PostgreSQL's server binaries.
# Usage: BUILD=build bash scripts/demo_pg.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1 || true)
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ] || ! command -v psql >/dev/null; then
  echo "demo: PostgreSQL is not installed; the PostgreSQL part is skipped"
  exit 0
fi
# Under /tmp: as root, PostgreSQL runs as postgres, which must reach it.
DIR=$(mktemp -d "${TMPDIR:-/tmp}/fencegate-demo-pg.XXXXXX")
# PostgreSQL refuses to run as root: as root, it runs as postgres.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then su postgres -c "$*"; else sh -c "$*"; fi
}
[ "$(id -u)" -eq 0 ] && chown postgres "$DIR"
PG_PORT=$((20000 + RANDOM % 10000)); PGW_PORT=$((PG_PORT + 1))
cleanup() {
  [ -f "$DIR/gateway.pid" ] && kill "$(cat "$DIR/gateway.pid")" 2>/dev/null || true
  as_pg "$PGBIN/pg_ctl -D $DIR/data -m fast stop" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
as_pg "$PGBIN/initdb -D $DIR/data -U postgres --auth=trust -E UTF8" >/dev/null
as_pg "$PGBIN/pg_ctl -D $DIR/data -l $DIR/postgres.log -w -o '-p $PG_PORT -k $DIR -c listen_addresses=127.0.0.1' start" >/dev/null
PSQL="psql -X -q -h 127.0.0.1 -p $PG_PORT -U postgres -d postgres -v ON_ERROR_STOP=1"
$PSQL -c "CREATE ROLE demo_worker LOGIN;
          CREATE TABLE jobs (id int PRIMARY KEY, owner text);
          INSERT INTO jobs VALUES (1, 'nobody');
          GRANT SELECT, UPDATE ON jobs TO demo_worker"
# The fence schema, and the advisory functions out of the route role's reach
# (the port holds each session's fence with an advisory lock).
"$BUILD/tools/fencectl/fencectl" pg-setup --admin_dsn="postgres://postgres@127.0.0.1:$PG_PORT/postgres" \
  --role=demo_worker --revoke_session_functions >/dev/null
"$BUILD/gateway/fencegate" --listen=127.0.0.1:0 --data_dir="$DIR/gateway" \
  --port_file="$DIR/gateway.port" --pg_listen="127.0.0.1:$PGW_PORT" \
  --route="db=postgres://demo_worker@127.0.0.1:$PG_PORT/postgres" >"$DIR/gateway.log" 2>&1 &
echo $! > "$DIR/gateway.pid"
for _ in $(seq 100); do [ -s "$DIR/gateway.port" ] && break; sleep 0.1; done
if [ ! -s "$DIR/gateway.port" ]; then
  echo "demo: the PostgreSQL route's gateway did not start:" >&2
  tail -n 5 "$DIR/gateway.log" >&2
  exit 1
fi
export FENCEGATE_ADDR="127.0.0.1:$(cat "$DIR/gateway.port")"
ctl="$BUILD/tools/fencectl/fencectl"
worker() {  # token sql...: a worker's psql session through the port
  local token=$1; shift
  PGOPTIONS="-c fencegate.domain=demo-pg -c fencegate.token=$token" \
    psql -X -h 127.0.0.1 -p "$PGW_PORT" -U demo_worker -d db -v ON_ERROR_STOP=1 "$@"
}
echo "demo: a worker's psql pointed at the gateway's PostgreSQL port (127.0.0.1:$PGW_PORT)"
set -x
worker 1 -c "UPDATE jobs SET owner = 'holder 1' WHERE id = 1"
$ctl fence --domain demo-pg --token 2
set +e
worker 1 -c "UPDATE jobs SET owner = 'late holder 1' WHERE id = 1"
rc=$?
set -e +x
echo "demo: the late psql exited with code $rc (its token 1 is stale); the row still says:"
$PSQL -tA -c "SELECT owner FROM jobs WHERE id = 1"
[ "$rc" -ne 0 ]
[ "$($PSQL -tA -c "SELECT owner FROM jobs WHERE id = 1")" = "holder 1" ]
