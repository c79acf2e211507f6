#!/usr/bin/env bash
# deploy/local/stack.sh - run memwright's backing services locally, without Docker.
#
#   deploy/local/stack.sh start    # start Kafka (KRaft, single node) + PostgreSQL
#   deploy/local/stack.sh start --brokers 3   # Kafka as a three-node KRaft cluster (also MEMWRIGHT_KAFKA_BROKERS=3)
#   deploy/local/stack.sh stop     # stop both (fine when already stopped)
#   deploy/local/stack.sh stop kafka   # (or postgres) one component only; same for start
#   deploy/local/stack.sh status   # print state; exit 0 only if both are running
#   deploy/local/stack.sh env      # print `export MEMWRIGHT_...` lines: eval "$(deploy/local/stack.sh env)"
#
# Everything listens on 127.0.0.1 only. All state (data, logs, pid files, the
# Kafka jars) lives under $ROOT/.local (override with MEMWRIGHT_LOCAL_DIR), so
# `rm -rf .local` (or `make clean`) resets everything.
#
# Overridable through the environment:
#   MEMWRIGHT_LOCAL_DIR   state folder             (default: <repo>/.local)
#   MEMWRIGHT_KAFKA_PORT  Kafka broker port        (default: 39092)
#                         Kafka controller port is  MEMWRIGHT_KAFKA_CONTROLLER_PORT (default: 39093)
#   MEMWRIGHT_PG_PORT     PostgreSQL port          (default: 35432)
#   MEMWRIGHT_KAFKA_BROKERS  1 or 3 Kafka nodes    (default: 1, or what the state folder was made with)
#                         node n > 1 listens on MEMWRIGHT_KAFKA_PORT + 2(n-1), its controller on
#                         MEMWRIGHT_KAFKA_CONTROLLER_PORT + 2(n-1); with 3 nodes topics get 3 replicas
#                         and min.insync.replicas 2, and `env` names all three brokers
#
# Needs: bash, Java 17+, Maven (first start only, to fetch the Kafka jars from
# Maven Central), PostgreSQL from Debian's packages (installed with apt-get
# when missing and running as root).
set -euo pipefail

# ---------------------------------------------------------------------------
# Locations and settings
# ---------------------------------------------------------------------------
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
ROOT="$(cd "$SCRIPT_DIR/../.." && pwd -P)"          # repository root (two folders up)

LOCAL_DIR="${MEMWRIGHT_LOCAL_DIR:-$ROOT/.local}"
KAFKA_PORT="${MEMWRIGHT_KAFKA_PORT:-39092}"
KAFKA_CONTROLLER_PORT="${MEMWRIGHT_KAFKA_CONTROLLER_PORT:-39093}"
PG_PORT="${MEMWRIGHT_PG_PORT:-35432}"
HOST=127.0.0.1

KAFKA_VERSION=3.9.1                                    # keep in sync with kafka-pom.xml
KAFKA_POM="$SCRIPT_DIR/kafka-pom.xml"
KAFKA_START_TIMEOUT=60                                 # seconds
KAFKA_STOP_TIMEOUT=30                                  # seconds
PG_START_TIMEOUT=60                                    # seconds

# Application credentials (local development only).
PG_APP_USER=memwright
PG_APP_PASSWORD=memwright
PG_APP_DB=memwright
PG_TEST_DB=memwright_test

KAFKA_BROKERS="${MEMWRIGHT_KAFKA_BROKERS:-}"             # resolved in init_dirs (flag, env, state folder, 1)

# Derived paths (made absolute once LOCAL_DIR exists, see init_dirs).
KAFKA_DIR="$LOCAL_DIR/kafka"
KAFKA_DATA="$KAFKA_DIR/data"
KAFKA_PROPS="$KAFKA_DIR/server.properties"
KAFKA_LOG4J="$KAFKA_DIR/log4j.properties"
KAFKA_LOG="$KAFKA_DIR/server.log"
KAFKA_OUT="$KAFKA_DIR/kafka.out"                      # JVM stdout/stderr
KAFKA_PID="$KAFKA_DIR/kafka.pid"
KAFKA_CLUSTER_ID_FILE="$KAFKA_DIR/cluster-id"
KAFKA_CACHE="$LOCAL_DIR/cache/kafka-$KAFKA_VERSION"
KAFKA_LIBS="$KAFKA_CACHE/libs"

PG_DIR="$LOCAL_DIR/pg"
PG_DATA="$PG_DIR/data"
PG_LOG="$PG_DIR/postgres.log"
PG_SOCKET_DIR="$PG_DIR/run"
PG_PWFILE="$PG_DIR/superuser.pw"                      # password of the `postgres` superuser

ENV_FILE="$LOCAL_DIR/env"
LOCK_FILE="$LOCAL_DIR/stack.lock"

# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------
log()  { printf '[stack] %s\n' "$*"; }
warn() { printf '[stack] WARNING: %s\n' "$*" >&2; }
die()  { printf '[stack] ERROR: %s\n' "$*" >&2; exit 1; }

# port_open PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
    (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# Progress line: "[stack] waiting for kafka ... 12s", rewritten in place on a
# terminal; in logs (CI) printed every 10 s on its own line instead.
if [[ -t 1 ]]; then
    progress()      { printf '\r[stack] waiting for %s ... %ss ' "$1" "$2"; }
    progress_done() { printf '\r[stack] waiting for %s ... %s\n' "$1" "$2"; }
else
    progress()      { if (( $2 % 10 == 0 )); then printf '[stack] waiting for %s ... %ss\n' "$1" "$2"; fi; }
    progress_done() { printf '[stack] waiting for %s ... %s\n' "$1" "$2"; }
fi

# Create the state folders and make LOCAL_DIR absolute (it may be relative
# when given through MEMWRIGHT_LOCAL_DIR).
init_dirs() {
    mkdir -p "$LOCAL_DIR"
    LOCAL_DIR="$(cd "$LOCAL_DIR" && pwd -P)"
    KAFKA_DIR="$LOCAL_DIR/kafka";   KAFKA_DATA="$KAFKA_DIR/data"
    KAFKA_PROPS="$KAFKA_DIR/server.properties"; KAFKA_LOG4J="$KAFKA_DIR/log4j.properties"
    KAFKA_LOG="$KAFKA_DIR/server.log"; KAFKA_OUT="$KAFKA_DIR/kafka.out"
    KAFKA_PID="$KAFKA_DIR/kafka.pid";  KAFKA_CLUSTER_ID_FILE="$KAFKA_DIR/cluster-id"
    KAFKA_CACHE="$LOCAL_DIR/cache/kafka-$KAFKA_VERSION"; KAFKA_LIBS="$KAFKA_CACHE/libs"
    PG_DIR="$LOCAL_DIR/pg"; PG_DATA="$PG_DIR/data"; PG_LOG="$PG_DIR/postgres.log"
    PG_SOCKET_DIR="$PG_DIR/run"; PG_PWFILE="$PG_DIR/superuser.pw"
    ENV_FILE="$LOCAL_DIR/env"; LOCK_FILE="$LOCAL_DIR/stack.lock"
    mkdir -p "$KAFKA_DIR" "$PG_DIR" "$LOCAL_DIR/cache"
    kafka_node 1
}

# How many Kafka nodes: --brokers / MEMWRIGHT_KAFKA_BROKERS, else what the state folder was
# formatted with, else 1. A formatted folder cannot change its count (the KRaft quorum is in it):
# `start` refuses a different count; stop, status and env use the folder's own.
kafka_resolve_brokers() {
    local made=""
    if [[ -f "$LOCAL_DIR/kafka/brokers" ]]; then made="$(cat "$LOCAL_DIR/kafka/brokers")"
    elif [[ -f "$LOCAL_DIR/kafka/data/meta.properties" ]]; then made=1; fi   # formatted before the count was kept
    if [[ "${1:-}" != strict && -n "$made" ]]; then KAFKA_BROKERS="$made"; fi
    [[ -n "$KAFKA_BROKERS" ]] || KAFKA_BROKERS="${made:-1}"
    [[ "$KAFKA_BROKERS" == 1 || "$KAFKA_BROKERS" == 3 ]] \
        || die "MEMWRIGHT_KAFKA_BROKERS (or --brokers) must be 1 or 3, not '$KAFKA_BROKERS'"
    if [[ -n "$made" && "$made" != "$KAFKA_BROKERS" ]]; then
        die "the Kafka data in $LOCAL_DIR was made for $made broker(s), not $KAFKA_BROKERS; run '$0 stop' and remove $LOCAL_DIR/kafka* (or use another MEMWRIGHT_LOCAL_DIR)"
    fi
}

# kafka_node N: point the KAFKA_* paths and ports at node N (node 1 keeps the single-node paths).
KAFKA_NODE=1
kafka_node() {
    KAFKA_NODE="$1"
    local suffix=""
    if (( KAFKA_NODE > 1 )); then suffix="-$KAFKA_NODE"; fi
    KAFKA_DIR="$LOCAL_DIR/kafka$suffix";   KAFKA_DATA="$KAFKA_DIR/data"
    KAFKA_PROPS="$KAFKA_DIR/server.properties"; KAFKA_LOG4J="$KAFKA_DIR/log4j.properties"
    KAFKA_LOG="$KAFKA_DIR/server.log"; KAFKA_OUT="$KAFKA_DIR/kafka.out"
    KAFKA_PID="$KAFKA_DIR/kafka.pid"
    NODE_PORT=$(( KAFKA_PORT + 2 * (KAFKA_NODE - 1) ))
    NODE_CONTROLLER_PORT=$(( KAFKA_CONTROLLER_PORT + 2 * (KAFKA_NODE - 1) ))
}

kafka_name() {
    if (( KAFKA_BROKERS > 1 )); then echo "kafka node $KAFKA_NODE"; else echo kafka; fi
}

# All brokers' addresses, comma-separated (the bootstrap list).
kafka_bootstrap() {
    local n list=""
    for (( n = 1; n <= KAFKA_BROKERS; n++ )); do
        list+="${list:+,}$HOST:$(( KAFKA_PORT + 2 * (n - 1) ))"
    done
    echo "$list"
}

# Serialise concurrent start/stop calls (e.g. two terminals, parallel CI steps).
# The servers are started with fd 9 closed so they never inherit the lock.
take_lock() {
    exec 9>"$LOCK_FILE"
    if ! flock -w 120 9; then
        die "another stack.sh is still running (lock $LOCK_FILE)"
    fi
}

# ---------------------------------------------------------------------------
# Environment for the application
# ---------------------------------------------------------------------------
print_env() {
    if (( KAFKA_BROKERS > 1 )); then echo "export MEMWRIGHT_TOPIC_REPLICATION=$KAFKA_BROKERS"; fi
    cat <<EOF
export MEMWRIGHT_KAFKA_BOOTSTRAP=$(kafka_bootstrap)
export MEMWRIGHT_PG_DSN=postgresql://$PG_APP_USER:$PG_APP_PASSWORD@$HOST:$PG_PORT/$PG_APP_DB
export MEMWRIGHT_TEST_PG_DSN=postgresql://$PG_APP_USER:$PG_APP_PASSWORD@$HOST:$PG_PORT/$PG_TEST_DB
EOF
}

# ===========================================================================
# Kafka (KRaft: one node, or three, each acting as broker and controller)
# ===========================================================================

# kafka_pid: print the pid of our running Kafka, or fail. A pid file whose
# process is gone (or is not a Kafka JVM any more) is considered stale.
kafka_pid() {
    [[ -f "$KAFKA_PID" ]] || return 1
    local pid
    pid="$(cat "$KAFKA_PID" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    local cmdline
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
    [[ "$cmdline" == *kafka.Kafka* ]] || return 1
    echo "$pid"
}

# Resolve the Kafka jars from Maven Central, once. Written to a temporary
# folder first so that an interrupted download is never mistaken for a cache.
kafka_fetch_jars() {
    if [[ -f "$KAFKA_CACHE/.complete" ]]; then
        return 0
    fi
    command -v mvn >/dev/null || die "Maven (mvn) is needed once to fetch the Kafka jars"
    log "resolving Kafka $KAFKA_VERSION jars from Maven Central into $KAFKA_LIBS (first start only)"
    local tmp="$KAFKA_CACHE/libs.tmp"
    rm -rf "$tmp"
    mkdir -p "$KAFKA_CACHE"
    # Output goes to a file: Maven 3.8 prints stray colour codes even with -q -B.
    mvn -q -B -f "$KAFKA_POM" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$tmp" >"$KAFKA_CACHE/mvn.log" 2>&1 \
        || { tail -n 30 "$KAFKA_CACHE/mvn.log" >&2; die "Maven could not resolve the Kafka jars (see $KAFKA_CACHE/mvn.log)"; }
    [[ -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" ]] || die "Maven did not produce kafka_2.13-$KAFKA_VERSION.jar"
    rm -rf "$KAFKA_LIBS"
    mv "$tmp" "$KAFKA_LIBS"
    touch "$KAFKA_CACHE/.complete"
    log "$(find "$KAFKA_LIBS" -name '*.jar' | wc -l) jars cached"
}

# Cluster id: generated once (22-char URL-safe base64 of 16 random bytes, the
# format Kafka's Uuid uses) and kept, so the formatted storage stays valid.
kafka_cluster_id() {
    if [[ ! -s "$KAFKA_CLUSTER_ID_FILE" ]]; then
        local id=""
        until [[ -n "$id" && "$id" != -* ]]; do
            id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
        done
        echo "$id" >"$KAFKA_CLUSTER_ID_FILE"
    fi
    cat "$KAFKA_CLUSTER_ID_FILE"
}

# (Re)write server.properties and log4j.properties; cheap, so done on every
# start, which also applies changed ports.
kafka_write_config() {
    local voters="" n
    for (( n = 1; n <= KAFKA_BROKERS; n++ )); do
        voters+="${voters:+,}$n@$HOST:$(( KAFKA_CONTROLLER_PORT + 2 * (n - 1) ))"
    done
    local isr=1 session_ms=9000                     # Kafka's default session
    if (( KAFKA_BROKERS > 1 )); then isr=2; session_ms=6000; fi  # acks=all needs 2 of 3; fail over sooner
    cat >"$KAFKA_PROPS" <<EOF
# Generated by deploy/local/stack.sh on every start - edit the script, not this file.
# KRaft node $KAFKA_NODE of $KAFKA_BROKERS: this process is both broker and controller.
process.roles=broker,controller
node.id=$KAFKA_NODE
controller.quorum.voters=$voters

listeners=PLAINTEXT://$HOST:$NODE_PORT,CONTROLLER://$HOST:$NODE_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$NODE_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER

log.dirs=$KAFKA_DATA
num.partitions=6
default.replication.factor=$KAFKA_BROKERS
min.insync.replicas=$isr
offsets.topic.replication.factor=$KAFKA_BROKERS
transaction.state.log.replication.factor=$KAFKA_BROKERS
transaction.state.log.min.isr=$isr
# A dead node is fenced (its partitions led elsewhere, and it leaves the ISR) after this long.
broker.session.timeout.ms=$session_ms
broker.heartbeat.interval.ms=1000
# Topics are created explicitly by the application.
auto.create.topics.enable=false
# No waiting for more consumers to join before the first rebalance (tests).
group.initial.rebalance.delay.ms=0
EOF

    cat >"$KAFKA_LOG4J" <<EOF
# Generated by deploy/local/stack.sh - everything goes to one rolling file.
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=$KAFKA_LOG
log4j.appender.file.MaxFileSize=50MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n

# Chatty loggers: warnings only.
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.network.RequestChannel\$=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.authorizer.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.org.apache.kafka.common.utils.AppInfoParser=WARN
EOF
}

# Format the storage directory once (meta.properties marks it as formatted).
kafka_format() {
    if [[ -f "$KAFKA_DATA/meta.properties" ]]; then
        return 0
    fi
    log "formatting Kafka storage in $KAFKA_DATA"
    mkdir -p "$KAFKA_DATA"
    java -cp "$KAFKA_LIBS/*" -Dlog4j.configuration="file:$KAFKA_LOG4J" \
        kafka.tools.StorageTool format --ignore-formatted \
        -t "$(kafka_cluster_id)" -c "$KAFKA_PROPS" >>"$KAFKA_OUT" 2>&1 \
        || { tail -n 20 "$KAFKA_OUT" >&2; die "kafka storage format failed (see $KAFKA_OUT)"; }
    echo "$KAFKA_BROKERS" >"$LOCAL_DIR/kafka/brokers"
}

# Start every node that is not running, then wait for each. Nodes of a cluster are all launched
# before any is waited for: none finishes starting until a quorum of controllers is up.
kafka_start() {
    command -v java >/dev/null || die "java is not installed (Java 17 expected)"
    kafka_fetch_jars
    local n launched=() formats=()
    kafka_cluster_id >/dev/null   # made once, here: formats side by side would each make their own
    for (( n = 1; n <= KAFKA_BROKERS; n++ )); do   # format new nodes side by side (a JVM each)
        kafka_node "$n"
        if ! kafka_pid >/dev/null && [[ ! -f "$KAFKA_DATA/meta.properties" ]]; then
            mkdir -p "$KAFKA_DIR"
            kafka_write_config
            kafka_format &
            formats+=("$!")
        fi
    done
    local pid
    for pid in "${formats[@]+"${formats[@]}"}"; do
        wait "$pid" || die "kafka storage format failed"
    done
    for (( n = 1; n <= KAFKA_BROKERS; n++ )); do
        kafka_node "$n"
        if kafka_launch; then launched+=("$n:$KAFKA_LAUNCH_LOG_START"); fi
    done
    local entry
    for entry in "${launched[@]+"${launched[@]}"}"; do
        kafka_node "${entry%%:*}"
        kafka_wait "${entry##*:}"
    done
    kafka_node 1
}

# kafka_launch: start the current node unless it runs; false when it was already running.
# Sets KAFKA_LAUNCH_LOG_START (the first log line this start writes).
kafka_launch() {
    local pid
    if pid="$(kafka_pid)"; then
        log "$(kafka_name) already running (pid $pid, $HOST:$NODE_PORT)"
        return 1
    fi
    rm -f "$KAFKA_PID"
    for port in "$NODE_PORT" "$NODE_CONTROLLER_PORT"; do
        if port_open "$port"; then
            die "port $HOST:$port is already taken by another process; set MEMWRIGHT_KAFKA_PORT / MEMWRIGHT_KAFKA_CONTROLLER_PORT"
        fi
    done
    mkdir -p "$KAFKA_DIR"
    kafka_write_config
    kafka_format

    # Remember where the log ends, to look only at lines written by this start.
    touch "$KAFKA_LOG"
    KAFKA_LAUNCH_LOG_START=$(( $(wc -l <"$KAFKA_LOG") + 1 ))

    local heap=768m
    if (( KAFKA_BROKERS > 1 )); then heap=512m; fi
    log "starting $(kafka_name) $KAFKA_VERSION on $HOST:$NODE_PORT (controller $HOST:$NODE_CONTROLLER_PORT)"
    # JVM options: the ones bin/kafka-run-class.sh uses, with a small heap.
    nohup java -Xms256m -Xmx$heap \
        -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
        -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
        -Dkafka.logs.dir="$KAFKA_DIR" -Dlog4j.configuration="file:$KAFKA_LOG4J" \
        -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_PROPS" \
        >>"$KAFKA_OUT" 2>&1 </dev/null 9>&- &
    echo "$!" >"$KAFKA_PID"
}

# kafka_wait LOG_START: wait until the current node serves requests.
kafka_wait() {
    local log_start="$1" pid name
    pid="$(cat "$KAFKA_PID")"
    name="$(kafka_name)"
    # Ready = the port accepts connections AND the server logged that it has
    # finished starting (the port is bound a little before requests are served).
    local waited=0
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            progress_done "$name" "process exited"
            rm -f "$KAFKA_PID"
            tail -n 30 "$KAFKA_LOG" "$KAFKA_OUT" >&2 || true
            die "$name exited during startup (logs: $KAFKA_LOG, $KAFKA_OUT)"
        fi
        if port_open "$NODE_PORT" \
           && awk -v from="$log_start" 'NR >= from && /Kafka Server started/ { found = 1 }
                                        END { exit !found }' "$KAFKA_LOG"; then
            progress_done "$name" "up after ${waited}s"
            break
        fi
        if (( waited >= KAFKA_START_TIMEOUT )); then
            progress_done "$name" "timed out after ${waited}s"
            tail -n 30 "$KAFKA_LOG" "$KAFKA_OUT" >&2 || true
            die "$name did not become ready in ${KAFKA_START_TIMEOUT}s (still running as pid $pid; run '$0 stop')"
        fi
        progress "$name" "$waited"
        sleep 1
        waited=$((waited + 1))
    done
    log "$name running (pid $pid, $HOST:$NODE_PORT)"
}

# Stop every node that runs (whatever the broker count: a folder may hold an older cluster's nodes).
kafka_stop() {
    local n pids=() any=0
    for n in 1 2 3; do
        kafka_node "$n"
        local pid
        if ! pid="$(kafka_pid)"; then
            rm -f "$KAFKA_PID"
            continue
        fi
        any=1
        log "stopping $(kafka_name) (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        pids+=("$n:$pid")
    done
    kafka_node 1
    if (( ! any )); then
        log "kafka already stopped"
        return 0
    fi
    local entry waited=0
    for entry in "${pids[@]}"; do
        local pid="${entry##*:}"
        while kill -0 "$pid" 2>/dev/null; do
            if (( waited >= KAFKA_STOP_TIMEOUT )); then
                warn "kafka node ${entry%%:*} did not stop in ${KAFKA_STOP_TIMEOUT}s; sending SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
                sleep 1
                break
            fi
            sleep 1
            waited=$((waited + 1))
        done
        kafka_node "${entry%%:*}"
        rm -f "$KAFKA_PID"
    done
    kafka_node 1
    log "kafka stopped"
}

kafka_status() {
    local n rc=0 pid name=kafka
    for (( n = 1; n <= KAFKA_BROKERS; n++ )); do
        kafka_node "$n"
        if (( KAFKA_BROKERS > 1 )); then name="kafka-$n"; fi
        if pid="$(kafka_pid)"; then
            printf '%-9s %-8s pid %-8s %s\n' "$name" running "$pid" "$HOST:$NODE_PORT"
        else
            printf '%-9s %-8s pid %-8s %s\n' "$name" stopped - "$HOST:$NODE_PORT"
            rc=1
        fi
    done
    kafka_node 1
    return "$rc"
}

# ===========================================================================
# PostgreSQL (Debian's package, our own cluster)
# ===========================================================================

# Newest PostgreSQL server binaries from Debian's packages.
PG_BIN=""
pg_find_bin() {
    local d
    PG_BIN=""
    while IFS= read -r d; do
        if [[ -x "$d/initdb" ]]; then PG_BIN="$d"; fi
    done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V)
    [[ -n "$PG_BIN" ]]
}

# Install the server package when no initdb is found (root only).
pg_ensure_installed() {
    pg_find_bin && return 0
    if [[ $EUID -ne 0 ]]; then
        die "PostgreSQL server is not installed; run: sudo apt-get install -y postgresql"
    fi
    log "PostgreSQL server not found; installing Debian's postgresql package"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y postgresql
    pg_find_bin || die "postgresql installed but no initdb under /usr/lib/postgresql/*/bin"
}

# as_pg CMD...: run a server command as the `postgres` OS user when we are
# root (the server refuses to run as root), otherwise as ourselves.
as_pg() {
    if [[ $EUID -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# Unix sockets have a ~107 byte path limit; with a deep checkout the socket
# under .local/pg would not fit, so fall back to a short per-checkout folder.
pg_choose_socket_dir() {
    local sock="$PG_SOCKET_DIR/.s.PGSQL.$PG_PORT.lock"
    if (( ${#sock} > 100 )); then
        PG_SOCKET_DIR="${TMPDIR:-/tmp}/memwright-pg-$(printf '%s' "$PG_DIR" | cksum | cut -d' ' -f1)"
        warn "path too long for a unix socket; using $PG_SOCKET_DIR"
    fi
}

# As root: give the pg folder to `postgres` and check that it can reach it.
pg_prepare_dirs() {
    mkdir -p "$PG_DIR" "$PG_SOCKET_DIR"
    if [[ $EUID -eq 0 ]]; then
        id postgres >/dev/null 2>&1 || die "no 'postgres' OS user (it comes with Debian's postgresql package)"
        chown postgres:postgres "$PG_DIR" "$PG_SOCKET_DIR"
        if [[ -d "$PG_DATA" ]]; then chown -R postgres:postgres "$PG_DATA"; fi
        if ! runuser -u postgres -- test -w "$PG_DIR" -a -x "$PG_DIR"; then
            die "the 'postgres' OS user cannot reach $PG_DIR: every parent folder needs o+x (e.g. chmod o+x on them), or set MEMWRIGHT_LOCAL_DIR to a traversable folder"
        fi
    fi
    chmod 700 "$PG_SOCKET_DIR"
}

# pg_running: true when the cluster's postmaster is alive.
pg_running() {
    [[ -n "$PG_BIN" && -f "$PG_DATA/PG_VERSION" ]] || return 1
    as_pg "$PG_BIN/pg_ctl" status -D "$PG_DATA" >/dev/null 2>&1
}

pg_pid() {
    pg_running || return 1
    head -n 1 "$PG_DATA/postmaster.pid" 2>/dev/null
}

# Create the cluster once, with a generated superuser password.
pg_initdb() {
    if [[ -f "$PG_DATA/PG_VERSION" ]]; then return 0; fi
    log "creating PostgreSQL cluster in $PG_DATA"
    if [[ ! -s "$PG_PWFILE" ]]; then
        (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=\n' >"$PG_PWFILE")
    fi
    if [[ $EUID -eq 0 ]]; then chown postgres:postgres "$PG_PWFILE"; fi
    chmod 600 "$PG_PWFILE"
    rm -rf "$PG_DATA"
    as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --pwfile="$PG_PWFILE" \
        --auth=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1 \
        || { tail -n 20 "$PG_DIR/initdb.log" >&2; die "initdb failed (see $PG_DIR/initdb.log)"; }
    # Our settings live in memwright.conf (rewritten on every start).
    as_pg sh -c "echo \"include_if_exists = 'memwright.conf'\" >>'$PG_DATA/postgresql.conf'"
}

# (Re)write the settings file, so port overrides take effect on restart.
pg_write_config() {
    local conf
    conf="$(cat <<EOF
# Generated by deploy/local/stack.sh on every start - edit the script, not this file.
listen_addresses = '$HOST'
port = $PG_PORT
unix_socket_directories = '$PG_SOCKET_DIR'
max_connections = 200
shared_buffers = 128MB
fsync = on
password_encryption = 'scram-sha-256'
log_timezone = 'UTC'
timezone = 'UTC'
EOF
)"
    printf '%s\n' "$conf" | as_pg sh -c "cat >'$PG_DATA/memwright.conf'"
}

# psql as the superuser over TCP (password from the pwfile), SQL on stdin.
pg_super_psql() {
    PGPASSWORD="$(cat "$PG_PWFILE")" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
        -h "$HOST" -p "$PG_PORT" -U postgres -d postgres
}

# Role memwright/memwright and its two databases; idempotent.
pg_provision() {
    pg_super_psql <<EOF
DO \$\$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_APP_USER') THEN
    CREATE ROLE $PG_APP_USER LOGIN CREATEDB PASSWORD '$PG_APP_PASSWORD';
  ELSE
    ALTER ROLE $PG_APP_USER LOGIN CREATEDB PASSWORD '$PG_APP_PASSWORD';
  END IF;
END
\$\$;
SELECT 'CREATE DATABASE $PG_APP_DB OWNER $PG_APP_USER'
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$PG_APP_DB') \gexec
SELECT 'CREATE DATABASE $PG_TEST_DB OWNER $PG_APP_USER'
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$PG_TEST_DB') \gexec
EOF
}

pg_start() {
    pg_ensure_installed
    pg_choose_socket_dir
    local pid
    if pid="$(pg_pid)"; then
        log "postgres already running (pid $pid, $HOST:$PG_PORT)"
        return 0
    fi
    if port_open "$PG_PORT"; then
        die "port $HOST:$PG_PORT is already taken by another process; set MEMWRIGHT_PG_PORT"
    fi
    pg_prepare_dirs
    pg_initdb
    pg_write_config

    log "starting postgres ($("$PG_BIN/postgres" --version | awk '{print $3}')) on $HOST:$PG_PORT"
    # pg_ctl writes the log file as the postgres user, so it must own it.
    touch "$PG_LOG"
    if [[ $EUID -eq 0 ]]; then chown postgres:postgres "$PG_LOG"; fi
    as_pg "$PG_BIN/pg_ctl" start -D "$PG_DATA" -l "$PG_LOG" -w -t "$PG_START_TIMEOUT" >/dev/null 9>&- \
        || { tail -n 30 "$PG_LOG" >&2; die "postgres failed to start (see $PG_LOG)"; }

    local waited=0
    until "$PG_BIN/pg_isready" -q -h "$HOST" -p "$PG_PORT"; do
        if (( waited >= PG_START_TIMEOUT )); then
            progress_done postgres "timed out after ${waited}s"
            tail -n 30 "$PG_LOG" >&2
            die "postgres is not accepting connections after ${PG_START_TIMEOUT}s"
        fi
        progress postgres "$waited"
        sleep 1
        waited=$((waited + 1))
    done
    progress_done postgres "up after ${waited}s"

    pg_provision
    log "postgres running (pid $(pg_pid), $HOST:$PG_PORT, databases $PG_APP_DB and $PG_TEST_DB)"
}

pg_stop() {
    pg_find_bin || { log "postgres not installed; nothing to stop"; return 0; }
    if ! pg_running; then
        log "postgres already stopped"
        return 0
    fi
    log "stopping postgres"
    as_pg "$PG_BIN/pg_ctl" stop -D "$PG_DATA" -m fast -w -t 60 >/dev/null
    log "postgres stopped"
}

pg_status() {
    pg_find_bin || true
    local pid
    if pid="$(pg_pid)"; then
        printf '%-9s %-8s pid %-8s %s\n' postgres running "$pid" "$HOST:$PG_PORT"
        return 0
    fi
    printf '%-9s %-8s pid %-8s %s\n' postgres stopped - "$HOST:$PG_PORT"
    return 1
}

# ===========================================================================
# Subcommands
# ===========================================================================
# An optional second argument (kafka | postgres) limits start/stop to one component,
# which the fault drills use to take one of them away while the other keeps running.
cmd_start() {
    init_dirs
    kafka_resolve_brokers strict
    take_lock
    local t0=$SECONDS
    [[ "${1:-all}" == postgres ]] || kafka_start
    [[ "${1:-all}" == kafka ]] || pg_start
    print_env >"$ENV_FILE"
    log "ready in $((SECONDS - t0))s; environment written to $ENV_FILE (eval \"\$($0 env)\")"
}

cmd_stop() {
    init_dirs
    kafka_resolve_brokers
    take_lock
    [[ "${1:-all}" == postgres ]] || kafka_stop
    [[ "${1:-all}" == kafka ]] || pg_stop
}

cmd_status() {
    init_dirs
    kafka_resolve_brokers
    local rc=0
    kafka_status || rc=1
    pg_status || rc=1
    return "$rc"
}

usage() {
    # The comment block at the top of this file, without the leading '# '.
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
}

main() {
    local args=()
    while (( $# )); do
        case "$1" in
            --brokers) [[ $# -ge 2 ]] || die "--brokers needs a number (1 or 3)"; KAFKA_BROKERS="$2"; shift 2 ;;
            --brokers=*) KAFKA_BROKERS="${1#--brokers=}"; shift ;;
            *) args+=("$1"); shift ;;
        esac
    done
    set -- "${args[@]+"${args[@]}"}"
    case "${1:-}" in
        start)  cmd_start "${2:-all}" ;;
        stop)   cmd_stop "${2:-all}" ;;
        status) cmd_status ;;
        env)    kafka_resolve_brokers; print_env ;;
        -h|--help|help) usage ;;
        *) usage >&2; exit 2 ;;
    esac
}

main "$@"
