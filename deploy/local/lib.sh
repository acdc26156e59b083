# Shared by deploy/local/up and deploy/local/test (sourced, not run).
# Starts the local stand-ins in the background and records their pids in INFRA_PIDS.

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
INFRA_PIDS=()

log() { printf '%s\n' "$*" >&2; }

# Sets NATS_SERVER and MONGO_STANDIN_CLASSPATH (installing them on first use).
install_standins() {
  local out
  out="$("$root/deploy/local/install")"
  NATS_SERVER="$(printf '%s\n' "$out" | sed -n 's/^NATS_SERVER=//p')"
  MONGO_STANDIN_CLASSPATH="$(printf '%s\n' "$out" | sed -n 's/^MONGO_STANDIN_CLASSPATH=//p')"
  S3_STANDIN_CLASSPATH="$(printf '%s\n' "$out" | sed -n 's/^S3_STANDIN_CLASSPATH=//p')"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wait_for_port() { # port seconds what
  local port="$1" deadline=$((SECONDS + $2))
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then log "$3 did not listen on port $port within $2 s"; return 1; fi
    sleep 0.1
  done
}

# start_mongo LOGFILE [H2FILE]: memory backend, or the H2 file backend when H2FILE is given.
# Exports MONGODB_URI. Opening a large H2 file takes a while (the stand-in reads the summaries
# of its documents into memory): it is waited for as long as the stand-in reports progress, and
# given up once it has said nothing new for MONGO_STANDIN_STALL seconds (default 60).
# On the H2 file the JVM's heap is bounded by MONGO_STANDIN_HEAP (default 1g; a day's 22,000
# predictions keep about 250 MB live): unbounded, G1 grew it to 4.6 GiB under a day's load.
# The memory backend, whose data lives in the heap, is left to the JVM's default.
# launch_mongo and await_mongo are its two halves, for starting other servers in between.
start_mongo() { launch_mongo "$@" && await_mongo; }

# launch_mongo LOGFILE [H2FILE]: starts the stand-in without waiting for it.
MONGO_LOG=""
launch_mongo() {
  local h2=() heap=()
  MONGO_LOG="$1"
  [ -n "${2:-}" ] && h2=(--h2 "$2") && heap=("-Xmx${MONGO_STANDIN_HEAP:-1g}")
  java @"$root/deploy/testing/mongo-standin/jvm.options" "${heap[@]}" -cp "$MONGO_STANDIN_CLASSPATH" Launcher "${h2[@]}" >"$MONGO_LOG" 2>&1 &
  INFRA_PIDS+=("$!")
  MONGO_PID="$!"
}

# await_mongo: waits for the stand-in launch_mongo started; exports MONGODB_URI.
await_mongo() {
  local logfile="$MONGO_LOG" stall="${MONGO_STANDIN_STALL:-60}" seen=0 size deadline
  deadline=$((SECONDS + stall))
  until grep -q '^LISTENING ' "$logfile" 2>/dev/null; do
    size=$(wc -c <"$logfile" 2>/dev/null || echo 0)
    if [ "$size" -gt "$seen" ]; then
      # Other lines (a JVM's "Picked up JAVA_TOOL_OPTIONS") are not progress, and not a failure.
      { grep -E '^(OPENING|PROGRESS) ' "$logfile" || true; } | tail -n 1 | sed 's/^/MongoDB stand-in: /' >&2
      seen="$size"
      deadline=$((SECONDS + stall))
    fi
    if ! kill -0 "$MONGO_PID" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
      log "the MongoDB stand-in did not start (no progress for $stall s, or it exited); see $logfile"; cat "$logfile" >&2; return 1
    fi
    sleep 0.2
  done
  MONGODB_URI="$(sed -n 's/^LISTENING //p' "$logfile" | head -n 1)"
  export MONGODB_URI
}

# start_nats LOGFILE STORE_DIR: nats-server with JetStream on a free port. Exports NATS_URL.
# It runs Go on NATS_GOMAXPROCS threads, 1 unless set: on one small machine shared with the
# services, the stand-in and the models, one thread spares the Go scheduler's cross-thread
# hand-offs (bench cog, 10 alternating runs: nats-server's CPU per Cog prediction 1.25 -> 0.90
# ms at 1 in flight, the added p50 2.12 -> 1.79 ms, p99 6.5 -> 4.1 ms). A nats-server on
# machines of its own keeps Go's default, one thread per core.
start_nats() { launch_nats "$@" && await_nats; }

# launch_nats LOGFILE STORE_DIR: starts nats-server without waiting for it.
launch_nats() {
  NATS_LOG="$1" NATS_PORT="$(free_port)"
  mkdir -p "$2"
  GOMAXPROCS="${NATS_GOMAXPROCS:-1}" "$NATS_SERVER" -js -a 127.0.0.1 -p "$NATS_PORT" -sd "$2" >"$NATS_LOG" 2>&1 &
  INFRA_PIDS+=("$!")
}

# await_nats: waits for the nats-server launch_nats started; exports NATS_URL.
await_nats() {
  wait_for_port "$NATS_PORT" 30 nats-server || { cat "$NATS_LOG" >&2; return 1; }
  NATS_URL="nats://127.0.0.1:$NATS_PORT"
  export NATS_URL
}

# start_s3 LOGFILE DIR: S3Proxy on a free port, objects as files under DIR/objects. Exports
# S3_ENDPOINT, S3_REGION, S3_FORCE_PATH_STYLE, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
# S3_BUCKET (default "files"; the services create it at start), and S3_SINGLE_PUT_MAX_BYTES at
# S3's largest PutObject: S3Proxy joins a multipart upload's parts by copying them, so a file
# whose length is declared (a Cog server's output) goes in one request (docs/files.md).
start_s3() { launch_s3 "$@" && await_s3; }

# launch_s3 LOGFILE DIR: starts S3Proxy without waiting for it.
launch_s3() {
  S3_LOG="$1" S3_PORT="$(free_port)"
  "$root/deploy/testing/s3-standin/run" "$S3_STANDIN_CLASSPATH" "$S3_PORT" "$2" >"$S3_LOG" 2>&1 &
  INFRA_PIDS+=("$!")
}

# await_s3: waits for the S3Proxy launch_s3 started; exports the S3_* and AWS_* settings.
await_s3() {
  wait_for_port "$S3_PORT" 60 S3Proxy || { cat "$S3_LOG" >&2; return 1; }
  export S3_ENDPOINT="http://127.0.0.1:$S3_PORT" S3_REGION="${S3_REGION:-us-east-1}" S3_FORCE_PATH_STYLE=true
  export AWS_ACCESS_KEY_ID=local-identity AWS_SECRET_ACCESS_KEY=local-credential
  export S3_BUCKET="${S3_BUCKET:-files}" S3_SINGLE_PUT_MAX_BYTES="${S3_SINGLE_PUT_MAX_BYTES:-5368709120}"
}

# stop_infra: stops the servers started above.
stop_infra() {
  local pid
  for pid in "${INFRA_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${INFRA_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  INFRA_PIDS=()
}

docker_available() {
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1
}
