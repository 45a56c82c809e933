"""A Kubernetes API server for gpuboard's tests: kmock's KubernetesEmulator, extended.

Usage: kmock_cluster.py [--load LIST_JSON]... [--synthetic NODES PODS] [--bookmark-s S]

Serves on 127.0.0.1 on a free port and prints `PORT <n>` on stdout once it listens; runs
until stdin closes or the process is terminated.

kmock 0.8's emulator keeps objects in memory and serves list, watch, get, create, patch
and delete, but with a fixed `resourceVersion`, no `410 Gone`, no bookmarks, and a watch
that replays every object as ADDED. What this harness adds, as a real API server does:

- a resourceVersion that increases with every change, stamped on each object, on each
  watch event and on each list;
- a watch from resourceVersion N sends the changes after N only (a kept event log), ends
  when told to (`drop-watches`: clients resume from where they were), and answers an
  `ERROR` event with a `410 Gone` Status (reason `Expired`) when N is older than the log;
- `BOOKMARK` events every --bookmark-s seconds when the client allows them;
- paged lists: a list with `limit` answers that many items (by namespace and name) and a
  `continue` token while more remain; the next pages, asked with the token, come from the
  same point in time (the first page's resourceVersion, as etcd's snapshot read gives a
  real server), and an unknown token answers `410 Gone` (reason `Expired`);
- the Eviction API (`POST .../pods/NAME/eviction`): the pod is deleted, or refused with
  429 and the API server's disruption-budget message for pods named by `budget`;
- control routes under /gpuboard-harness/: `POST drop-watches`, `POST expire` (JSON body
  `{"delete": [[plural, namespace, name], ...]}`: deleted silently, the log cut, every
  watch ended, so clients must relist to learn it), `POST budget` (`{"pods": [[ns, name]]}`
  a disruption budget protects), `POST forbid` (`{"on": true}`: every change answers 403 as
  RBAC does), `GET stats` (counters).
"""

import argparse
import asyncio
import itertools
import json
import sys

import aiohttp.web

import kmock
from kmock import resource

KINDS = {"nodes": "Node", "pods": "Pod"}


def stamp(obj, rv):
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta["resourceVersion"] = str(rv)
    out["metadata"] = meta
    return out


class Tap:
    """Stands in for kmock's per-resource bus: each change gets the next version."""

    def __init__(self, cluster, plural):
        self.cluster = cluster
        self.plural = plural

    async def put(self, event):
        c = self.cluster
        c.rv += 1
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        key = (self.plural, meta.get("namespace"), meta.get("name"))
        if event.get("type") == "DELETED":
            c.rv_of.pop(key, None)
        else:
            c.rv_of[key] = c.rv
        c.log.append((c.rv, self.plural, {"type": event["type"], "object": stamp(obj, c.rv)}))
        await c.wake()


class Taps(dict):
    def __init__(self, cluster):
        super().__init__()
        self.cluster = cluster

    def __missing__(self, res):
        tap = Tap(self.cluster, res.plural)
        self[res] = tap
        return tap


class Cluster(kmock.KubernetesEmulator):
    def __attrs_post_init__(self):
        super().__attrs_post_init__()
        self.rv = 1000
        self.rv_of = {}
        self.log = []
        self.floor = 0
        self.epoch = 0
        self.bookmark_s = 1.0
        self.stats = {"lists": 0, "watches": 0, "gone": 0, "bookmarks": 0, "pages": {}}
        self.paged = {}
        self.tokens = itertools.count(1)
        self.cond = None
        self._buses = Taps(self)
        self["post /gpuboard-harness/drop-watches"] << self.drop_watches
        self["post /gpuboard-harness/expire"] << self.expire
        self["get /gpuboard-harness/stats"] << self.show_stats
        self["post /gpuboard-harness/budget"] << self.set_budget
        self["post /gpuboard-harness/forbid"] << self.set_forbid
        self.budgets = set()
        self.forbidden = False

    async def wake(self):
        if self.cond is None:
            self.cond = asyncio.Condition()
        async with self.cond:
            self.cond.notify_all()

    def load(self, plural, item):
        meta = item.get("metadata") or {}
        ns = meta.get("namespace") if plural == "pods" else None
        key = (resource("", "v1", plural), ns, meta["name"])
        self.objects[key] = item
        self.rv += 1
        self.rv_of[(plural, ns, meta["name"])] = self.rv

    async def drop_watches(self, request):
        self.epoch += 1
        await self.wake()
        return {"epoch": self.epoch}

    async def expire(self, request):
        body = json.loads(request.body or b"{}")
        for plural, ns, name in body.get("delete", []):
            key = (resource("", "v1", plural), ns, name)
            if key in self.objects and not self.objects[key].deleted:
                self.objects[key].delete()
            self.rv += 1
            self.rv_of.pop((plural, ns, name), None)
        self.floor = self.rv
        self.log.clear()
        self.epoch += 1
        await self.wake()
        return {"floor": self.floor}

    async def set_budget(self, request):
        body = json.loads(request.body or b"{}")
        self.budgets = {tuple(p) for p in body.get("pods", [])}
        return {"budgets": len(self.budgets)}

    async def set_forbid(self, request):
        self.forbidden = bool(json.loads(request.body or b"{}").get("on"))
        return {"forbidden": self.forbidden}

    @staticmethod
    def status(code, reason, message):
        return aiohttp.web.json_response({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
        }, status=code)

    async def _handle(self, request):
        token = request.params.get("continue")
        if request.resource is not None and token and token not in self.paged:
            return self.status(410, "Expired",
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter.")
        changing = str(request.method).upper().rsplit(".", 1)[-1] in ("POST", "PATCH", "PUT", "DELETE")
        if request.resource is not None and changing and self.forbidden:
            plural = request.resource.plural
            return self.status(403, "Forbidden",
                f'{plural} "{request.name}" is forbidden: User "system:serviceaccount:gpu:gpuboard" '
                f'cannot {str(request.method).lower().rsplit(".", 1)[-1]} resource "{plural}" in API group ""')
        if request.resource is not None and changing and request.subresource == "eviction":
            ns, name = request.namespace, request.name
            key = (resource("", "v1", "pods"), ns, name)
            if key not in self.objects or self.objects[key].deleted:
                return self.status(404, "NotFound", f'pods "{name}" not found')
            if (ns, name) in self.budgets:
                return self.status(429, "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.")
            raw = self.objects[key].raw
            self.objects[key].delete()
            await self._buses[resource("", "v1", "pods")].put({"type": "DELETED", "object": raw})
            return aiohttp.web.json_response({
                "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201,
            }, status=201)
        return await super()._handle(request)

    async def show_stats(self, request):
        return dict(self.stats, rv=self.rv, floor=self.floor)

    async def _serve_list(self, request):
        plural = request.resource.plural
        limit = int(request.params.get("limit") or 0)
        token = request.params.get("continue") or ""
        if token in self.paged:
            rv, items = self.paged.pop(token)
        else:
            self.stats["lists"] += 1
            rv = self.rv
            items = []
            for (res, ns, name), obj in sorted(self.objects.items(),
                                               key=lambda kv: (kv[0][1] or "", kv[0][2])):
                if res.plural != plural or obj.deleted:
                    continue
                if request.namespace and ns != request.namespace:
                    continue
                items.append(stamp(obj.raw, self.rv_of.get((plural, ns, name), self.rv)))
        meta = {"resourceVersion": str(rv)}
        if limit > 0:
            pages = self.stats["pages"]
            pages[plural] = pages.get(plural, 0) + 1
            if len(items) > limit:
                rest = items[limit:]
                items = items[:limit]
                nxt = f"{plural}-{next(self.tokens)}"
                self.paged[nxt] = (rv, rest)
                meta["continue"] = nxt
                meta["remainingItemCount"] = len(rest)
        return {
            "apiVersion": "v1",
            "kind": KINDS.get(plural, "") + "List",
            "metadata": meta,
            "items": items,
        }

    async def _serve_watch(self, request):
        yield b""
        self.stats["watches"] += 1
        plural = request.resource.plural
        since = int(request.params.get("resourceVersion") or 0)
        bookmarks = request.params.get("allowWatchBookmarks") == "true"
        epoch = self.epoch
        if since and since < self.floor:
            self.stats["gone"] += 1
            yield {
                "type": "ERROR",
                "object": {
                    "apiVersion": "v1",
                    "kind": "Status",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {since} ({self.floor})",
                    "reason": "Expired",
                    "code": 410,
                },
            }
            return
        pos = 0
        while pos < len(self.log) and self.log[pos][0] <= since:
            pos += 1
        if self.cond is None:
            self.cond = asyncio.Condition()
        while True:
            while pos < len(self.log):
                _, p, event = self.log[pos]
                pos += 1
                ns = (event["object"].get("metadata") or {}).get("namespace")
                if p == plural and (not request.namespace or ns == request.namespace):
                    yield event
            if self.epoch != epoch:
                return
            timed_out = False
            async with self.cond:
                try:
                    await asyncio.wait_for(self.cond.wait(), timeout=self.bookmark_s)
                except asyncio.TimeoutError:
                    timed_out = True
            if timed_out and bookmarks and self.epoch == epoch:
                self.stats["bookmarks"] += 1
                yield {
                    "type": "BOOKMARK",
                    "object": {
                        "apiVersion": "v1",
                        "kind": KINDS.get(plural, ""),
                        "metadata": {"resourceVersion": str(self.rv)},
                    },
                }


def synthetic(cluster, nodes, pods):
    """NODES nodes of 8 GPUs and PODS pods of one GPU each, bound round-robin."""
    for i in range(nodes):
        cluster.load("nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"node-{i:05}", "uid": f"00000000-0000-4000-8000-{i:012}",
                         "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                    "nvidia.com/gpu.memory": "81559"}},
            "spec": {},
            "status": {"capacity": {"cpu": "96", "nvidia.com/gpu": "8"},
                       "allocatable": {"cpu": "95", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
        })
    for j in range(pods):
        cluster.load("pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"job-{j:06}", "namespace": f"team-{j % 20}",
                         "uid": f"11111111-0000-4000-8000-{j:012}",
                         "creationTimestamp": "2026-11-20T08:00:00Z",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x" * 600}},
            "spec": {"nodeName": f"node-{j % max(nodes, 1):05}",
                     "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running",
                       "conditions": [{"type": "PodScheduled", "status": "True"}]},
        })


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--load", action="append", default=[])
    ap.add_argument("--synthetic", nargs=2, type=int)
    ap.add_argument("--bookmark-s", type=float, default=1.0)
    args = ap.parse_args()
    async with Cluster() as cluster, kmock.Server(cluster) as server:
        cluster.bookmark_s = args.bookmark_s
        for path in args.load:
            with open(path) as f:
                doc = json.load(f)
            plural = {"NodeList": "nodes", "PodList": "pods"}[doc["kind"]]
            for item in doc["items"]:
                cluster.load(plural, item)
        if args.synthetic:
            synthetic(cluster, *args.synthetic)
        print(f"PORT {server.port}", flush=True)
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        loop.add_reader(sys.stdin.fileno(), lambda: done.set() if not sys.stdin.readline() else None)
        await done.wait()


if __name__ == "__main__":
    asyncio.run(main())
