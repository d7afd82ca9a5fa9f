#!/bin/bash
# Builds the Debian packages from the build tree with CPack, checks what
# they hold and depend on, checks the systemd unit (systemd-analyze verify)
# and the logrotate snippet, then runs the gateway and fencectl unpacked
# from the server package with the configuration it installs (data
# directory, port and audit log redirected): health answers, a stale write
# is refused.
#
#   package_test.sh BUILD_DIR
set -euo pipefail
build_dir=$1
work=$(mktemp -d)
gateway_pid=
cleanup() {
  if [[ -n $gateway_pid ]]; then kill "$gateway_pid" 2>/dev/null || true; wait "$gateway_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cpack --config "$build_dir/CPackConfig.cmake" -B "$work/out" -G DEB \
  >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; fail "cpack failed"; }
server=$(ls "$work"/out/fencegate_*.deb 2>/dev/null) || fail "no fencegate package"
client=$(ls "$work"/out/fencegate-client-dev_*.deb 2>/dev/null) || fail "no fencegate-client-dev package"

# What each package holds.
server_files=$(dpkg-deb -c "$server" | awk '{print $6}')
for f in ./usr/bin/fencegate ./usr/bin/fencectl \
         ./lib/systemd/system/fencegate.service \
         ./etc/fencegate/fencegate.textproto ./etc/logrotate.d/fencegate \
         ./usr/share/doc/fencegate/README.md ./usr/share/doc/fencegate/operations.md; do
  grep -qxF "$f" <<<"$server_files" || fail "fencegate lacks $f"
done
if grep -E '\.a$|/include/' <<<"$server_files"; then fail "fencegate holds client files"; fi
client_files=$(dpkg-deb -c "$client" | awk '{print $6}')
grep -q '^./usr/include/fencegate/client/token_source.h$' <<<"$client_files" || fail "no client headers"
grep -q '/cmake/fencegate/fencegateConfig.cmake$' <<<"$client_files" || fail "no CMake package"
grep -q '/libfencegate_client.a$' <<<"$client_files" || fail "no client library"
if grep -E '/bin/|/etc/' <<<"$client_files"; then fail "fencegate-client-dev holds server files"; fi

# Dependencies: computed from the binaries, plus what the scripts use.
depends=$(dpkg-deb -f "$server" Depends)
for d in libc6 librocksdb libgrpc++ libpq5 libsystemd0 adduser; do
  grep -q "$d" <<<"$depends" || fail "fencegate does not depend on $d: $depends"
done
[[ $(dpkg-deb -f "$server" Version) == "$(dpkg-deb -f "$client" Version)" ]] || fail "versions differ"
grep -q libgrpc++-dev <<<"$(dpkg-deb -f "$client" Depends)" || fail "client-dev misses libgrpc++-dev"

# Maintainer scripts and conffiles.
dpkg-deb -e "$server" "$work/control"
for s in postinst prerm postrm; do
  [[ -x $work/control/$s ]] || fail "no executable $s"
  sh -n "$work/control/$s" || fail "$s does not parse"
done
grep -qxF /etc/fencegate/fencegate.textproto "$work/control/conffiles" || fail "config is not a conffile"

dpkg-deb -x "$server" "$work/root"
root=$work/root

# The unit, as systemd reads it (its ExecStart pointed at the unpacked
# binary, which verify requires to exist). Any complaint fails the test.
sed "s#^ExecStart=/usr/bin/fencegate#ExecStart=$root/usr/bin/fencegate#" \
  "$root/lib/systemd/system/fencegate.service" >"$work/fencegate.service"
verify=$(systemd-analyze verify "$work/fencegate.service" 2>&1) || fail "systemd-analyze verify: $verify"
[[ -z $verify ]] || fail "systemd-analyze verify: $verify"
unit=$root/lib/systemd/system/fencegate.service
for line in Type=notify User=fencegate StateDirectory=fencegate ProtectSystem=strict \
            NoNewPrivileges=yes PrivateTmp=yes Restart=on-failure LimitNOFILE= \
            'ExecReload=/bin/kill -HUP $MAINPID' TimeoutStopSec=; do
  grep -q "^$line" "$unit" || fail "the unit lacks $line"
done

# The logrotate snippet (its user swapped for one that exists here).
sed 's/fencegate fencegate/root root/g' "$root/etc/logrotate.d/fencegate" >"$work/logrotate.conf"
rotate=$(logrotate -d "$work/logrotate.conf" 2>&1) || fail "logrotate: $rotate"
if grep -qi '^error' <<<"$rotate"; then fail "logrotate: $rotate"; fi

# The unpacked gateway with the installed configuration.
"$root/usr/bin/fencegate" --config="$root/etc/fencegate/fencegate.textproto" \
  --data_dir="$work/data" --audit_log="$work/audit.log" \
  --listen=127.0.0.1:0 --port_file="$work/port" 2>"$work/gateway.log" &
gateway_pid=$!
for _ in $(seq 1 300); do
  [[ -s $work/port ]] && break
  kill -0 "$gateway_pid" 2>/dev/null || { cat "$work/gateway.log"; fail "the gateway exited"; }
  sleep 0.1
done
[[ -s $work/port ]] || fail "the gateway did not start"
addr=127.0.0.1:$(cat "$work/port")
fencectl=$root/usr/bin/fencectl
"$fencectl" --addr="$addr" health >/dev/null || fail "health did not answer"
"$fencectl" --addr="$addr" write --domain=package --token=5 --resource=files/package.txt \
  --put=five >/dev/null || fail "a write with token 5 failed"
rc=0
"$fencectl" --addr="$addr" write --domain=package --token=4 --resource=files/package.txt \
  --put=four >/dev/null 2>&1 || rc=$?
[[ $rc == 3 ]] || fail "a token-4 write after token 5 exited $rc, not 3 (stale)"
[[ $(cat "$work/data/files/package.txt") == five ]] || fail "the stale write landed"
grep -q package "$work/audit.log" || fail "the audit log has no line for the domain"
kill -TERM "$gateway_pid"
rc=0
wait "$gateway_pid" || rc=$?
gateway_pid=
[[ $rc == 0 ]] || fail "the gateway exited $rc on SIGTERM"
echo "packages: $(basename "$server") $(basename "$client")"
