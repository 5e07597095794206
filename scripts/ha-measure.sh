#!/bin/bash
# Usage: N=20000 scripts/ha-measure.sh (uses the built binary; loopback ports 27401-29093).
# Replication measurements on loopback (debug build): CPU per request with and without
# [cluster], replication lag while learning, full-copy throughput.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${SWITCHYARD:-$ROOT/target/debug/switchyard}
D=$(mktemp -d /tmp/ha-measure.XXXX)
KEY=measure-cluster-key-0123456789abc
for i in 1 2; do $B origin --listen 127.0.0.1:2900$i --name s$i > $D/o$i.log 2>&1 & echo $! >> $D/pids; done
conf() { # name port admin clusterblock
cat <<EOC
workers = 1
[admin]
listen = "127.0.0.1:$3"
$4
[[service]]
name = "web"
listen = "127.0.0.1:$2"
pool = "main"
[[pool]]
name = "main"
persistence = { header = "x-user", capacity = 1000000 }
servers = [{ address = "127.0.0.1:29001", name = "s1" }, { address = "127.0.0.1:29002", name = "s2" }]
EOC
}
cl() { printf '[cluster]\nname = "%s"\nlisten = "127.0.0.1:%s"\nkey = "%s"\nsync_timeout = "1s"\n[[cluster.peers]]\nname = "%s"\naddress = "127.0.0.1:%s"\n' $1 $2 $KEY $3 $4; }
conf n 28083 29093 "" > $D/n.toml
conf a 28081 29091 "$(cl lb1 27401 lb2 27402)" > $D/a.toml
conf b 28082 29092 "$(cl lb2 27402 lb1 27401)" > $D/b.toml
for n in n a b; do SWITCHYARD_LOG=info $B run -c $D/$n.toml > $D/$n.log 2>&1 & echo $! > $D/$n.pid; echo $! >> $D/pids; done
sleep 2
cpu() { awk '{print $14+$15}' /proc/$(cat $D/$1.pid)/stat; }
N=${N:-40000}
for target in n a; do
  port=$([ $target = n ] && echo 28083 || echo 28081)
  c0=$(cpu $target); cb0=$(cpu b)
  if [ $target = a ]; then
    ( for i in $(seq 1 200); do $B ctl --admin http://127.0.0.1:29091 --json cluster 2>/dev/null | python3 -c 'import json,sys; v=json.load(sys.stdin); p=v["peers"][0]; print(p["lag_ms"], p["sent"], p["queued"], p["dropped"])'; sleep 0.25; done > $D/lag.txt ) & LAGPID=$!
  fi
  echo "== $target: $(python3 $ROOT/scripts/ha-load.py 127.0.0.1 $port $target $N 8)"
  c1=$(cpu $target); cb1=$(cpu b)
  echo "   cpu ticks (1/100 s): $((c1-c0)) for $N requests -> $(python3 -c "print('%.1f us/request' % (($c1-$c0)*10000/$N))")"
  [ $target = a ] && echo "   peer lb2 cpu ticks: $((cb1-cb0)) -> $(python3 -c "print('%.1f us/update received' % (($cb1-$cb0)*10000/$N))")"
  [ $target = a ] && { kill $LAGPID 2>/dev/null; sleep 1; }
done
echo "lag samples (ms, sent, queued, dropped), last 5:"; tail -5 $D/lag.txt
python3 - $D/lag.txt <<'EOP'
import sys
v=[float(l.split()[0]) for l in open(sys.argv[1]) if l.strip()]
v=[x for x in v if x>0]; v.sort()
if v: print("lag ms: samples %d median %.2f p90 %.2f max %.2f" % (len(v), v[len(v)//2], v[int(len(v)*0.9)], v[-1]))
EOP
sleep 2
echo "tables: a=$($B ctl --admin http://127.0.0.1:29091 --json persistence main --limit 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])') b=$($B ctl --admin http://127.0.0.1:29092 --json persistence main --limit 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')"
# full copy: restart b, time from its start to "full copy received"
kill $(cat $D/b.pid); sleep 1
t0=$(date +%s.%N); SWITCHYARD_LOG=info $B run -c $D/b.toml > $D/b2.log 2>&1 & echo $! > $D/b.pid; echo $! >> $D/pids
for i in $(seq 1 300); do grep -q "full copy received" $D/b2.log && break; sleep 0.05; done
t1=$(date +%s.%N)
for i in $(seq 1 100); do tb=$($B ctl --admin http://127.0.0.1:29092 --json persistence main --limit 1 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])' 2>/dev/null); [ -n "$tb" ] && break; sleep 0.1; done
echo "full copy: b restarted, synced after $(python3 -c "print('%.2f s' % ($t1-$t0))") (includes process start), holds $tb entries"
grep "full copy" $D/b2.log $D/a.log | tail -3
for p in $(cat $D/pids); do kill $p 2>/dev/null; done
echo "logs in $D"
