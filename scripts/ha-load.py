#!/usr/bin/env python3
"""Load for scripts/ha-measure.sh: TOTAL requests over CONNS keep-alive connections, each a new x-user value."""
import http.client, sys, time, threading
host, port, prefix, total, conns = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
done = [0]; errors = [0]
def run(k):
    c = http.client.HTTPConnection(host, port, timeout=5)
    for i in range(k, total, conns):
        try:
            c.request("GET", "/?size=0", headers={"x-user": "%s-%d" % (prefix, i)})
            r = c.getresponse(); r.read()
            done[0] += 1
        except Exception:
            errors[0] += 1
            c = http.client.HTTPConnection(host, port, timeout=5)
t0 = time.time()
ts = [threading.Thread(target=run, args=(k,)) for k in range(conns)]
[t.start() for t in ts]; [t.join() for t in ts]
el = time.time() - t0
print("requests %d errors %d seconds %.2f rate %.0f/s" % (done[0], errors[0], el, done[0] / el))
