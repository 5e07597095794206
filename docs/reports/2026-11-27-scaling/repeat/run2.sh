#!/bin/bash
# Same-run check of two switchyard builds' scaling (keep-alive), then the single-core
# per-request cells at 128 B on this CPU beside HAProxy and NGINX.
set -u
D=$(cd "$(dirname "$0")" && pwd)
W=/tmp/sy; mkdir -p $W; cd $W
xz -dc $D/sy.xz > sy-old && xz -dc $D/sy-new.xz > sy-new && chmod +x sy-old sy-new
tar xJf $D/peers.txz
export PATH=$W/bin:$PATH LD_LIBRARY_PATH=$W/lib
mkdir -p /var/lib/nginx /var/log/nginx
for round in 1 2; do
  for b in old new; do
    ./sy-$b bench scaling --workers 1,2,3,4,6 --duration 4 --out $W/$b-$round > $OUT/$b-$round.log 2>&1
    cp $W/$b-$round/scaling.json $OUT/$b-$round.json
    grep -A8 "^| workers | connections" $W/$b-$round/scaling.md | head -8 | sed "s/^/$b-$round /"
  done
done
timeout 240 ./sy-new bench --only l4-cps,l4-throughput,l7-keepalive-rps,l7-cps --sizes 128 --peers haproxy,nginx,switchyard=$W/sy-old --syscalls off --out $W/cells > $OUT/cells.log 2>&1
cp $W/cells/report.md $OUT/cells.md 2>/dev/null; cp $W/cells/results.json $OUT/cells.json 2>/dev/null
grep -E "^\|" $W/cells/report.md | head -60
