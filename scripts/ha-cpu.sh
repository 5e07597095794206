#!/bin/bash
# Usage: ROUNDS=5 SECONDS_PER_RUN=5 scripts/ha-cpu.sh
# Proxy CPU per request with replication off and on, in the same run, alternating,
# on the release binary (target/release/switchyard). The measured proxy is pinned to
# CPU 0 (taskset); wrk, the origins and the peer node share CPU 1. CPU time is read
# from /proc/PID/stat (utime, stime: user and kernel apart) around each wrk run;
# requests from wrk's own count. Two loads: `new` (every request a new x-user value:
# one stick-table update per request, the worst case for replication) and `known`
# (256 users learned beforehand: refreshes only). Loopback ports 27501-29193.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${SWITCHYARD:-$ROOT/target/release/switchyard}
ROUNDS=${ROUNDS:-5}
SECS=${SECONDS_PER_RUN:-5}
D=$(mktemp -d /tmp/ha-cpu.XXXX)
KEY=measure-cluster-key-0123456789abc
TCK=$(getconf CLK_TCK)
cleanup() { for p in $(cat $D/pids 2>/dev/null); do kill $p 2>/dev/null; done; }
trap cleanup EXIT
for i in 1 2; do taskset -c 1 $B origin --listen 127.0.0.1:2910$i --name s$i > $D/o$i.log 2>&1 & echo $! >> $D/pids; done
conf() { # admin port, listen port, cluster block
cat <<EOC
workers = 1
[admin]
listen = "127.0.0.1:$1"
$3
[[service]]
name = "web"
listen = "127.0.0.1:$2"
pool = "main"
[[pool]]
name = "main"
persistence = { header = "x-user", capacity = 10000000 }
servers = [{ address = "127.0.0.1:29101", name = "s1" }, { address = "127.0.0.1:29102", name = "s2" }]
EOC
}
cl() { printf '[cluster]\nname = "%s"\nlisten = "127.0.0.1:%s"\nkey = "%s"\nsync_timeout = "1s"\n[[cluster.peers]]\nname = "%s"\naddress = "127.0.0.1:%s"\n' $1 $2 $KEY $3 $4; }
conf 29193 28183 "" > $D/off.toml
conf 29191 28181 "$(cl lb1 27501 lb2 27502)" > $D/on.toml
conf 29192 28182 "$(cl lb2 27502 lb1 27501)" > $D/peer.toml
start() { # name cpu
  SWITCHYARD_LOG=warn taskset -c $2 $B run -c $D/$1.toml > $D/$1.log 2>&1 & echo $! > $D/$1.pid; echo $! >> $D/pids
}
start off 0; start on 0; start peer 1
sleep 2
cat > $D/new.lua <<'EOL'
-- wrk does not seed Lua's generator: every run would repeat the same users.
local prefix = string.format("u%d-%d", os.time(), math.floor(os.clock() * 1e6))
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/?size=0", { ["x-user"] = prefix .. "-" .. n })
end
EOL
cat > $D/known.lua <<'EOL'
request = function()
  return wrk.format("GET", "/?size=0", { ["x-user"] = "k" .. math.random(1, 256) })
end
EOL
ticks() { awk '{print $14, $15}' /proc/$(cat $D/$1.pid)/stat; }
# Learn the 256 known users on both nodes first.
for port in 28183 28181; do taskset -c 1 wrk -t1 -c4 -d1s -s $D/known.lua http://127.0.0.1:$port/ > /dev/null; done
echo "load mode requests user_us/req sys_us/req total_us/req"
for round in $(seq 1 $ROUNDS); do
  for load in new known; do
    for mode in off on; do
      port=$([ $mode = off ] && echo 28183 || echo 28181)
      read u0 s0 < <(ticks $mode)
      out=$(taskset -c 1 wrk -t1 -c16 -d${SECS}s -s $D/$load.lua http://127.0.0.1:$port/)
      read u1 s1 < <(ticks $mode)
      n=$(echo "$out" | awk '/requests in/ {print $1}')
      python3 -c "u=($u1-$u0)/$TCK*1e6/$n; s=($s1-$s0)/$TCK*1e6/$n; print('$load $mode %d %.1f %.1f %.1f' % ($n, u, s, u+s))"
    done
  done
done | tee $D/results.txt
sleep 1
v=$($B ctl --admin http://127.0.0.1:29191 --json cluster)
echo "peer view of lb1 after the runs: $(echo "$v" | python3 -c 'import json,sys; p=json.load(sys.stdin)["peers"][0]; print({k: p[k] for k in ("connected","sent","dropped","queued","lag_ms")})')"
python3 - $D/results.txt <<'EOP'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l[0] in "nk"]
for load in ("new", "known"):
    for mode in ("off", "on"):
        t = [float(r[5]) for r in rows if r[0] == load and r[1] == mode]
        u = [float(r[3]) for r in rows if r[0] == load and r[1] == mode]
        if t:
            print("%-5s %-3s total us/req median %.1f (min %.1f max %.1f)  user median %.1f  n=%d" % (load, mode, st.median(t), min(t), max(t), st.median(u), len(t)))
EOP
echo "files in $D"
