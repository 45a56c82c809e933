#!/usr/bin/env python3
"""Ray's closest thing to a gpuboard claim: create a placement group of one {"GPU": 0.25}
bundle, wait until it is placed, remove it. 32 concurrent client threads against a real
Ray head started by this script on 127.0.0.1 with 4 (logical) GPUs.

Prints one line in the format of benches/http_claims.rs:
  ray pairs=N pairs/s=X pair p50=A ms p99=B ms
BENCH_SECS (default 5) and BENCH_CLIENTS (default 32) as for the Rust bench.
"""
import os
import sys
import threading
import time

try:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
except ImportError:
    print("ray: not installed (pip install 'ray[default]'); Ray comparison skipped")
    sys.exit(0)

secs = float(os.environ.get("BENCH_SECS", "5"))
clients = int(os.environ.get("BENCH_CLIENTS", "32"))
warmup = float(os.environ.get("RAY_WARMUP", "5"))

ray.init(
    num_gpus=4,
    num_cpus=2,
    include_dashboard=False,
    _node_ip_address="127.0.0.1",
    logging_level="ERROR",
    log_to_driver=False,
)

stop = threading.Event()
lock = threading.Lock()
latencies = []


def client():
    started = time.monotonic()
    mine = []
    while not stop.is_set():
        t = time.monotonic()
        pg = placement_group([{"GPU": 0.25}])
        ray.get(pg.ready())
        remove_placement_group(pg)
        if time.monotonic() - started > warmup:
            mine.append(time.monotonic() - t)
    with lock:
        latencies.extend(mine)


threads = [threading.Thread(target=client) for _ in range(clients)]
for t in threads:
    t.start()
time.sleep(warmup)
with lock:
    pass
t0 = time.monotonic()
time.sleep(secs)
stop.set()
elapsed = time.monotonic() - t0
for t in threads:
    t.join()
ray.shutdown()

latencies.sort()


def pct(p):
    if not latencies:
        return 0.0
    return latencies[round((len(latencies) - 1) * p)] * 1000.0


print(
    f"ray clients={clients} pairs={len(latencies)} pairs/s={len(latencies) / elapsed:.0f} "
    f"pair p50={pct(0.5):.2f} ms p99={pct(0.99):.2f} ms"
)
