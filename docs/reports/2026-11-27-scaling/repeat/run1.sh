#!/bin/bash
# Multi-core scaling on the lent machine: switchyard vs HAProxy/NGINX, same run.
set -u
D=$(cd "$(dirname "$0")" && pwd)
W=/tmp/sy; mkdir -p $W; cd $W
xz -dc $D/sy.xz > switchyard && chmod +x switchyard
tar xJf $D/peers.txz
export PATH=$W/bin:$PATH LD_LIBRARY_PATH=$W/lib
mkdir -p /var/lib/nginx /var/log/nginx /run
{ uname -a; nproc; lscpu; cat /proc/meminfo | head -3; which taskset haproxy nginx; haproxy -v | head -1; nginx -v; ./switchyard --version; } > $OUT/machine.txt 2>&1
cat $OUT/machine.txt | head -30
ulimit -n 200000 || ulimit -n 65536
ulimit -n
./switchyard bench scaling --workers ${WORKERS:-1,2,4,6} --duration ${DUR:-4} --peers haproxy,nginx --out $W/ka > $OUT/ka.log 2>&1
cp $W/ka/scaling.md $OUT/ka.md; cp $W/ka/scaling.json $OUT/ka.json
tail -30 $OUT/ka.md
./switchyard bench scaling --workers ${PCW:-1,2,4} --duration ${DUR:-4} --peers haproxy --per-connection --out $W/pc > $OUT/pc.log 2>&1
cp $W/pc/scaling.md $OUT/pc.md; cp $W/pc/scaling.json $OUT/pc.json
tail -30 $OUT/pc.md
