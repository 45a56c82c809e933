"""Holds GPU shares on a Ray cluster so the gpuboard Ray source has something real to read.

Usage: ray_driver.py ADDRESS OUT_JSON

Connects to the head at ADDRESS, starts actors and tasks holding 0.25 and 0.5 GPU, a
placement group with a GPU bundle and a task inside it, one task asking for 8 GPUs
(infeasible on a 4-GPU head), and a STRICT_PACK placement group of 2 bundles of 2 GPUs
that fits the head but not what is free (pending). Each holder reports what `ray.get_gpu_ids()` says inside it;
the driver writes them all to OUT_JSON (atomically), then holds everything until stdin
closes or the process is terminated.
"""

import json
import os
import sys
import time

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@ray.remote
class Holder:
    def __init__(self, label):
        self.label = label

    def where(self):
        ctx = ray.get_runtime_context()
        return {
            "label": self.label,
            "kind": "actor",
            "id": ctx.get_actor_id(),
            "gpu_ids": [int(g) for g in ray.get_gpu_ids()],
            "node_id": ctx.get_node_id(),
        }


@ray.remote
def hold(label, started_dir):
    ctx = ray.get_runtime_context()
    info = {
        "label": label,
        "kind": "task",
        "id": ctx.get_task_id(),
        "gpu_ids": [int(g) for g in ray.get_gpu_ids()],
        "node_id": ctx.get_node_id(),
    }
    with open(os.path.join(started_dir, label + ".json"), "w") as f:
        json.dump(info, f)
    # Hold the GPU share until the driver goes away.
    while True:
        time.sleep(3600)


def main():
    address, out = sys.argv[1], sys.argv[2]
    started_dir = out + ".d"
    os.makedirs(started_dir, exist_ok=True)
    ray.init(address=address, namespace="gpuboard-test", log_to_driver=False)

    actors = {
        "actor-quarter": Holder.options(num_gpus=0.25, num_cpus=0, name="actor-quarter").remote("actor-quarter"),
        "actor-half": Holder.options(num_gpus=0.5, num_cpus=0, name="actor-half").remote("actor-half"),
    }
    tasks = [
        hold.options(num_gpus=0.25, num_cpus=0, name="task-quarter").remote("task-quarter", started_dir),
        hold.options(num_gpus=0.5, num_cpus=0, name="task-half").remote("task-half", started_dir),
    ]
    pg = placement_group([{"GPU": 0.5, "CPU": 0}], strategy="PACK", name="pg-half")
    ray.get(pg.ready(), timeout=120)
    tasks.append(
        hold.options(
            num_gpus=0.25,
            num_cpus=0,
            name="task-in-pg",
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0),
        ).remote("task-in-pg", started_dir)
    )
    # Can never run here: the head has 4 GPUs.
    infeasible = hold.options(num_gpus=8, num_cpus=0, name="task-infeasible").remote("task-infeasible", started_dir)
    # Fits the head's 4 GPUs, not what the holders leave free: waits.
    waiting = placement_group([{"GPU": 2}, {"GPU": 2}], strategy="STRICT_PACK", name="pg-waiting")

    holders = [ray.get(a.where.remote(), timeout=120) for a in actors.values()]
    want = {"task-quarter", "task-half", "task-in-pg"}
    deadline = time.monotonic() + 120
    while True:
        done = {n[: -len(".json")] for n in os.listdir(started_dir) if n.endswith(".json")}
        if want <= done:
            break
        if time.monotonic() > deadline:
            sys.exit("tasks did not start within 120 s: " + ", ".join(sorted(want - done)))
        time.sleep(0.2)
    for label in sorted(want):
        with open(os.path.join(started_dir, label + ".json")) as f:
            holders.append(json.load(f))

    result = {
        "holders": holders,
        "placement_group": {"id": pg.id.hex(), "bundles": [{"GPU": 0.5}]},
        "infeasible": {"name": "task-infeasible", "gpus": 8},
        "waiting": {"id": waiting.id.hex(), "strategy": "STRICT_PACK", "bundles": [{"GPU": 2}, {"GPU": 2}]},
    }
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, out)
    # Hold everything until told to stop.
    sys.stdin.read()
    del infeasible, waiting


if __name__ == "__main__":
    main()
