#!/usr/bin/env bash
# Supervises one local control plane: starts its components on request, reaps them, and tears them
# all down when the cluster is stopped, when the process that started it dies, or when a maximum
# lifetime runs out. processes.ts (under cluster.ts) is its only client; it is not meant to be run by hand.
#
# Usage: supervisor.sh DIR OWNER_PID OWNER_START_TICKS MAX_LIFETIME_SECONDS
#   DIR                   the cluster folder (run/ and logs/ inside it)
#   OWNER_PID             the process whose death tears the cluster down
#   OWNER_START_TICKS     field 22 (starttime) of /proc/OWNER_PID/stat, so a reused pid is not
#                         mistaken for the owner
#   MAX_LIFETIME_SECONDS  hard bound on how long this loop, and so the cluster, lives
#
# Protocol (files in DIR/run):
#   ready        created once the signal traps are installed; send no signal before it exists
#   NAME.argv    argv of component NAME, NUL-separated (written by the client)
#   NAME.want    created by the client to ask for NAME to be started (then SIGUSR1 to wake us,
#                the loop also polls every 0.5 s); we launch `setsid ARGV... >>logs/NAME.log 2>&1`,
#                write its pid (= its process group id) to NAME.pid and remove NAME.want
#   detached     owner death no longer tears the cluster down (`cluster.ts up`)
#   stop         tear down and exit (SIGTERM, SIGINT and SIGHUP do the same)
# Components are stopped by the client signalling their process groups; this process only reaps
# them. Teardown: SIGTERM to every component group but etcd's, up to 10 s, then SIGKILL; then the
# same for etcd.
set -uo pipefail # no -e: a failing command must not end the supervision

if (($# != 4)); then
  echo "usage: supervisor.sh DIR OWNER_PID OWNER_START_TICKS MAX_LIFETIME_SECONDS" >&2
  exit 2
fi
dir=$1 owner=$2 owner_start=$3 max_lifetime_s=$4
run=$dir/run
logs=$dir/logs
exec </dev/null >>"$logs/supervisor.log" 2>&1

log() { printf '%(%Y-%m-%dT%H:%M:%S)T supervisor: %s\n' -1 "$*"; }

# stat_fields PID: sets array `f` to the fields of /proc/PID/stat after the command name, so
# field N of proc(5) is ${f[N-3]}: f[0] state, f[1] ppid, f[2] pgrp, f[19] starttime.
stat_fields() {
  local line
  f=()
  read -r line 2>/dev/null <"/proc/$1/stat" || return 1
  read -r -a f <<<"${line##*) }"
}

owner_alive() {
  [[ -e $run/detached ]] && return 0
  local -a f
  stat_fields "$owner" || return 1
  [[ ${f[0]} != Z && ${f[19]} == "$owner_start" ]]
}

# my_components: prints the pids recorded in run/*.pid that are still children of this process.
my_components() {
  local p pf
  local -a f
  for pf in "$run"/*.pid; do
    [[ -e $pf ]] || continue
    p=$(<"$pf")
    [[ $p =~ ^[0-9]+$ ]] || continue
    stat_fields "$p" || continue
    [[ ${f[1]} == "$$" && ${f[0]} != Z ]] && echo "$p"
  done
}

# stop_groups PGID... : SIGTERM to each process group, up to 10 s, then SIGKILL.
stop_groups() {
  local p i alive
  (($# == 0)) && return 0
  for p; do kill -TERM -- "-$p" 2>/dev/null; done
  for ((i = 0; i < 100; i++)); do # 100 x 0.1 s = 10 s
    alive=0
    for p; do kill -0 -- "-$p" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  for p; do kill -KILL -- "-$p" 2>/dev/null; done
  return 0
}

# Teardown in two steps: etcd last, so kube-apiserver's shutdown hooks (which write to etcd) do
# not hang until SIGKILL.
teardown() {
  trap '' TERM INT HUP USR1
  log "tearing down: $1"
  local p etcd=
  local -a pids first=()
  mapfile -t pids < <(my_components)
  [[ -r $run/etcd.pid ]] && etcd=$(<"$run/etcd.pid")
  for p in "${pids[@]}"; do [[ $p == "$etcd" ]] || first+=("$p"); done
  stop_groups "${first[@]}"
  ((${#first[@]} == ${#pids[@]})) || stop_groups "$etcd"
  wait
  log "down"
  exit 0
}

start_wanted() {
  local w name pid
  local -a argv
  for w in "$run"/*.want; do
    [[ -e $w ]] || continue
    name=${w##*/}
    name=${name%.want}
    argv=()
    [[ -r $run/$name.argv ]] && mapfile -d '' -t argv <"$run/$name.argv"
    if ((${#argv[@]} == 0)); then
      log "no argv for $name, not started"
      rm -f "$w"
      continue
    fi
    setsid "${argv[@]}" >>"$logs/$name.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$run/$name.pid.tmp" && mv -f "$run/$name.pid.tmp" "$run/$name.pid"
    rm -f "$w"
    log "started $name pid $pid"
  done
}

trap 'teardown "signal"' TERM INT HUP
trap ':' USR1 # only interrupts the wait below
touch "$run/ready"
log "supervising $dir for owner $owner, at most ${max_lifetime_s}s"

started_any=0
idle_turns=0 # loop turns (0.5 s each) in a row with no component running
deadline=$((SECONDS + max_lifetime_s))
while ((SECONDS < deadline)); do
  [[ -e $run/stop ]] && teardown "stop requested"
  owner_alive || teardown "owner process $owner exited"
  start_wanted
  if [[ -n $(my_components) ]]; then
    started_any=1
    idle_turns=0
  elif ((started_any)); then
    # Every component is gone (crashed or stopped by the client) and nothing was asked for
    # within 60 s: the cluster is over.
    idle_turns=$((idle_turns + 1))
    ((idle_turns >= 120)) && teardown "no component left running"
  fi
  sleep 0.5 &
  wait $! 2>/dev/null
done
teardown "maximum lifetime of ${max_lifetime_s}s reached"
