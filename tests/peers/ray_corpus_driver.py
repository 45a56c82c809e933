"""Puts a real Ray head into a busy, untidy state for the answer corpus (tests/corpus/ray).

Usage: ray_corpus_driver.py ADDRESS DASHBOARD_URL READY_FILE

On a head with 4 GPUs and `accelerator_type:L4`: a 2-GPU actor, a detached actor, an actor
killed at once (dead), a task asking for accelerator_type L4, a job submitted through the
Jobs API holding 0.25 GPU, a task queued on the full node (2 GPU), pending placement groups
of each strategy that fit the cluster but not its free GPUs, and infeasible ones (8 GPU, and
STRICT_SPREAD over 2 bundles on one node). Writes READY_FILE when everything placed is
placed, then holds until stdin closes.
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
    def where(self):
        return [int(g) for g in ray.get_gpu_ids()]


@ray.remote
def hold(label, started_dir):
    with open(os.path.join(started_dir, label), "w") as f:
        json.dump([int(g) for g in ray.get_gpu_ids()], f)
    while True:
        time.sleep(3600)


JOB = (
    sys.executable + " -c \"import ray, time; ray.init(); "
    "f = ray.remote(num_gpus=0.25, num_cpus=0)(lambda: time.sleep(3600)); "
    "r = f.remote(); time.sleep(3600)\""
)


def main():
    address, dashboard, ready = sys.argv[1], sys.argv[2], sys.argv[3]
    started = ready + ".d"
    os.makedirs(started, exist_ok=True)
    ray.init(address=address, namespace="gpuboard-corpus", log_to_driver=False)
    seen = {}

    big = Holder.options(num_gpus=2, num_cpus=0, name="actor-two-gpus").remote()
    detached = Holder.options(
        num_gpus=0.25, num_cpus=0, name="actor-detached", lifetime="detached"
    ).remote()
    doomed = Holder.options(num_gpus=0.25, num_cpus=0, name="actor-killed").remote()
    seen["actor-two-gpus"] = ray.get(big.where.remote(), timeout=180)
    seen["actor-detached"] = ray.get(detached.where.remote(), timeout=180)
    ray.get(doomed.where.remote(), timeout=180)
    ray.kill(doomed)

    typed = hold.options(num_gpus=0.25, num_cpus=0, accelerator_type="L4", name="task-l4").remote(
        "task-l4", started
    )
    pg = placement_group([{"GPU": 0.5, "CPU": 0}], strategy="PACK", name="pg-created")
    ray.get(pg.ready(), timeout=180)
    in_pg = hold.options(
        num_gpus=0.25,
        num_cpus=0,
        name="task-in-pg",
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg),
    ).remote("task-in-pg", started)

    job_id = None
    try:
        from ray.job_submission import JobSubmissionClient

        job_id = JobSubmissionClient(dashboard).submit_job(entrypoint=JOB, submission_id="corpus-job")
    except Exception as e:  # recorded as missing, not fatal
        seen["job_error"] = repr(e)

    for label in ["task-l4", "task-in-pg"]:
        deadline = time.monotonic() + 180
        while not os.path.exists(os.path.join(started, label)):
            if time.monotonic() > deadline:
                sys.exit(label + " did not start")
            time.sleep(0.2)
        with open(os.path.join(started, label)) as f:
            seen[label] = json.load(f)

    # Pending: fit the cluster's 4 GPUs, not what is free now.
    queued = hold.options(num_gpus=2, num_cpus=0, name="task-queued").remote("task-queued", started)
    pending = [
        placement_group([{"GPU": 2}, {"GPU": 2}], strategy=s, name="pg-pending-" + s.lower())
        for s in ["PACK", "SPREAD", "STRICT_PACK"]
    ]
    # Never: no node has 8 GPUs; STRICT_SPREAD needs 2 nodes.
    infeasible = [
        placement_group([{"GPU": 8}], strategy="PACK", name="pg-infeasible-pack"),
        placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_SPREAD", name="pg-infeasible-strict-spread"),
    ]
    never = hold.options(num_gpus=8, num_cpus=0, name="task-infeasible").remote("task-infeasible", started)

    with open(ready + ".tmp", "w") as f:
        json.dump({"gpu_ids": seen, "job": job_id}, f, indent=1)
    os.replace(ready + ".tmp", ready)
    sys.stdin.read()
    del typed, in_pg, queued, pending, infeasible, never


if __name__ == "__main__":
    main()
