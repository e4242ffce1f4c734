#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests: `source scripts/pg-server.sh`
# (after `set -euo pipefail`) installs Debian's `postgresql` package when no
# server binaries are found, runs `initdb` in a fresh temporary directory as an
# unprivileged user (PostgreSQL refuses to run as root: as root it uses the
# system user `stratum-pg`, created when missing), starts the server on a free
# loopback port with trust authentication for that user only, creates the
# database `stratum_test`, exports
#   STRATUM_TEST_PG=postgres://stratum@127.0.0.1:PORT/stratum_test
# and installs an EXIT trap that stops the server and removes the directory.
# `pg_server_stop` stops it earlier.

pg_bindir() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

if ! PG_BIN="$(pg_bindir)"; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "error: the PostgreSQL tests need a server: install the Debian package postgresql" >&2
            exit 2
        fi
        sudo="sudo"
    fi
    $sudo apt-get update -qq >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    PG_BIN="$(pg_bindir)"
fi

# run a command as the server's user
if [ "$(id -u)" -eq 0 ]; then
    if ! id stratum-pg >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin stratum-pg
    fi
    pg_as() { setpriv --reuid=stratum-pg --regid="$(id -g stratum-pg)" --clear-groups -- "$@"; }
else
    pg_as() { "$@"; }
fi

# under /tmp: the server's user must reach it (a TMPDIR may be private to root)
PG_DIR="$(mktemp -d /tmp/stratum-pg.XXXXXX)"
chmod 755 "$PG_DIR"
if [ "$(id -u)" -eq 0 ]; then chown stratum-pg "$PG_DIR"; fi
PG_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

pg_as "$PG_BIN/initdb" --pgdata="$PG_DIR/data" --username=stratum --auth=trust \
    --encoding=UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1 || {
    cat "$PG_DIR/initdb.log" >&2
    exit 2
}
pg_as "$PG_BIN/pg_ctl" --pgdata="$PG_DIR/data" --log="$PG_DIR/server.log" --wait \
    -o "-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories=$PG_DIR -c max_connections=200" \
    start >/dev/null || {
    cat "$PG_DIR/server.log" >&2
    exit 2
}

pg_server_stop() {
    if [ -n "${PG_DIR:-}" ] && [ -d "$PG_DIR" ]; then
        pg_as "$PG_BIN/pg_ctl" --pgdata="$PG_DIR/data" --mode=fast --wait stop >/dev/null 2>&1 || true
        rm -rf "$PG_DIR"
    fi
}
trap pg_server_stop EXIT

"$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U stratum -d postgres \
    -c "CREATE DATABASE stratum_test" >/dev/null
export STRATUM_TEST_PG="postgres://stratum@127.0.0.1:$PG_PORT/stratum_test"
export STRATUM_TEST_PSQL="$PG_BIN/psql"
echo "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') for the tests: $STRATUM_TEST_PG"
