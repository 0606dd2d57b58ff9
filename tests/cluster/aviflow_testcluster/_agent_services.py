"""Services for the node agent's pods: kube-proxy, cluster DNS and a load-balancer controller.

What a real cluster spreads over kube-proxy, CoreDNS, the endpoints controller, the kubelet
and a cloud controller, done here by the agent for the pods it runs:

* it list+watches Services of all namespaces. Each Service that has a selector and a cluster
  IP (types ClusterIP, NodePort, LoadBalancer; not headless, not ExternalName) gets a
  loopback address of its own from the pods' allocator (``127.<block>.x.y``) for its whole
  life. The cluster IP the API server assigned (``10.96.x.y``) is not routable here, so names
  resolve to the agent's address instead. ``default/kubernetes`` gets one too and routes to
  the API server (the apiserver's endpoint reconciler is off in this harness);
* endpoints: the Ready pods of the Service's namespace that match its selector and are not
  being deleted, at ``<podIP>:<targetPort>`` (a named target port is looked up in the pod's
  container ports), counted once a server listens there (the kernel's socket table says;
  see ``_agent_service_model.serving`` for why). ``_agent_proxy`` listens on
  ``<address>:<port>`` for each TCP port and forwards each connection to one of them; with
  none, the port is not listened on and connects are refused;
* DNS: every pod's ``/etc/hosts`` maps each Service's address to
  ``<svc>.<ns>.svc.cluster.local <svc>.<ns>.svc <svc>.<ns>``, plus ``<svc>`` for Services of
  the pod's own namespace (what the DNS search path would resolve), rewritten in place as
  Services come and go;
* ``<SVC>_SERVICE_HOST``/``_PORT`` and the Docker link variables, as the kubelet injects
  them (``enableServiceLinks``), with the agent's address;
* ``type: LoadBalancer`` (without a ``loadBalancerClass``) gets
  ``status.loadBalancer.ingress: [{ip: <address>}]``, which the host can connect to.

One thread watches, one syncs (woken by any Service or pod change, every 0.25 s while a
ready endpoint has no server yet, and every 5 s to retry a port it could not bind or a
status it could not write); the proxying runs on ``ProxyLoop``'s asyncio thread. The pure
parts (what a Service, an endpoint, a hosts record, a variable is) are in
``_agent_service_model``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from kubernetes import client, watch

from ._agent_common import WATCH_SECONDS, RawWatch, log
from ._agent_proxy import ProxyLoop, ServiceProxy
from ._agent_service_model import (
    APISERVER,
    WILDCARD,
    Service,
    Target,
    hosts_line,
    link_env,
    listening_sockets,
    ready_endpoints,
    service_targets,
    serving,
)

if TYPE_CHECKING:
    from ._agent import Agent

RESYNC_SECONDS = 5.0  # retry a port that could not be bound, a status not written
POLL_SECONDS = 0.25  # while a ready endpoint has no server yet


class Reflector:
    """list, then watch from that resourceVersion, in a thread of its own; relist when the
    watch ends or fails (the server closes it after WATCH_SECONDS; a client read timeout
    ends a silent one). ``stop()`` shuts an open watch's socket, so it ends at once."""

    def __init__(
        self,
        list_fn: Callable,
        relist: Callable[[list[dict]], None],
        observe: Callable[[str, dict], None],
        what: str,
    ) -> None:
        self.list_fn, self.relist, self.observe, self.what = list_fn, relist, observe, what
        self.stopping = threading.Event()
        self.watch: watch.Watch | None = None
        # daemon only as a safety net: stop() joins it
        self.thread = threading.Thread(target=self.run, name=f"{what}-reflector", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 10) -> None:
        self.stopping.set()
        deadline = time.monotonic() + timeout
        while self.thread.is_alive() and time.monotonic() < deadline:
            if self.watch is not None:
                self.watch.stop()  # again until it takes: the stream may just be opening
            self.thread.join(0.2)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._list_and_watch()
            except Exception as e:
                if self.stopping.is_set():
                    return
                status = e.status if isinstance(e, client.ApiException) else repr(e)
                log.info("%s watch ended (%s); relisting", self.what, status)
                self.stopping.wait(0.5)

    def _list_and_watch(self) -> None:
        data = json.loads(self.list_fn(_preload_content=False, _request_timeout=(10, 60)).data)
        self.relist(data["items"])
        self.watch = RawWatch()
        for ev in self.watch.stream(
            self.list_fn,
            resource_version=data["metadata"]["resourceVersion"],
            timeout_seconds=WATCH_SECONDS,
            allow_watch_bookmarks=True,
            _request_timeout=(10, WATCH_SECONDS + 15),
        ):
            if self.stopping.is_set():
                return
            if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self.observe(ev["type"], ev["raw_object"])


class Services:
    """The Service table, its addresses, listeners, hosts records and LoadBalancer status."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.lock = threading.Lock()
        self.known: dict[str, Service] = {}  # uid -> Service (address set if routed)
        self.loop = ProxyLoop()
        self.wake = threading.Event()
        # owned by the sync thread
        self.proxies: dict[str, ServiceProxy] = {}
        self.routes: dict[str, dict[int, list[Target]]] = {}
        self.bind_errors: dict[str, dict[int, str]] = {}
        self.published: frozenset[tuple[str, str, str]] = frozenset()
        self.waiting = False  # a ready endpoint has no server yet: poll the socket table
        self.syncer = threading.Thread(target=self.sync_loop, name="service-sync")
        self.reflector = Reflector(
            agent.core.list_service_for_all_namespaces, self.relist, self.observe, "service"
        )

    # ----------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.loop.start()
        self.syncer.start()
        self.reflector.start()

    def stop(self) -> None:
        """After ``agent.stopping`` is set: stop watching and syncing, close every listener
        and connection, stop the proxy loop; every thread of ours is joined."""
        self.reflector.stop()
        self.wake.set()
        if self.syncer.is_alive():
            self.syncer.join()
        if self.loop.thread.is_alive():
            for proxy in self.proxies.values():
                self.loop.call(proxy.close())
        self.proxies.clear()
        self.loop.stop()

    def kick(self) -> None:
        """Something changed (a Service, a pod's readiness or labels): sync soon."""
        self.wake.set()

    # --------------------------------------------------------- the watch
    def _parse(self, obj: dict) -> Service:
        """A Service with its address: kept for its life (by uid), new if it became routed."""
        svc = Service.from_json(obj)
        if not svc.routed:
            return svc
        old = self.known.get(svc.uid)
        return replace(
            svc, address=old.address if old and old.address else self.agent.allocate_ip()
        )

    def observe(self, kind: str, obj: dict) -> None:
        with self.lock:
            if kind == "DELETED":
                self.known.pop(obj["metadata"]["uid"], None)
            else:
                svc = self._parse(obj)
                self.known[svc.uid] = svc
        self.kick()

    def relist(self, items: list[dict]) -> None:
        with self.lock:
            parsed = [self._parse(obj) for obj in items]
            self.known = {s.uid: s for s in parsed}
        self.kick()

    # ------------------------------------------------------ what pods see
    def routed(self) -> list[Service]:
        with self.lock:
            return sorted(
                (s for s in self.known.values() if s.address),
                key=lambda s: (s.namespace, s.name),
            )

    def hosts_lines(self, namespace: str) -> list[str]:
        return [hosts_line(s, namespace) for s in self.routed()]

    def env_vars(self, namespace: str, links: bool) -> dict[str, str]:
        """What the kubelet adds for a pod in ``namespace``: its namespace's Services when
        ``enableServiceLinks`` (``links``), and the API server's ``kubernetes`` always."""
        env: dict[str, str] = {}
        for s in self.routed():
            if (s.namespace, s.name) == APISERVER or (links and s.namespace == namespace):
                env.update(link_env(s))
        return env

    # -------------------------------------------------------------- sync
    def sync_loop(self) -> None:
        while not self.agent.stopping.is_set():
            self.wake.wait(POLL_SECONDS if self.waiting else RESYNC_SECONDS)
            self.wake.clear()
            if self.agent.stopping.is_set():
                return
            try:
                self.sync()
            except Exception:
                log.exception("service sync failed; retrying")
                time.sleep(0.5)

    def sync(self) -> None:
        """Bring listeners, hosts files and LoadBalancer status in line with the table."""
        services = {s.uid: s for s in self.routed()}
        endpoints = ready_endpoints(self.agent)
        sockets = listening_sockets()
        waiting = False
        for uid, svc in services.items():
            proxy = self.proxies.get(uid)
            if proxy is None:
                proxy = self.proxies[uid] = ServiceProxy(f"{svc.namespace}/{svc.name}", svc.address)
            ready = service_targets(svc, endpoints, self.agent.args.kubernetes_port)
            live = {port: [t for t in ts if serving(t, sockets)] for port, ts in ready.items()}
            waiting = waiting or live != ready
            self._route(svc, proxy, live, sockets)
            if svc.wants_ingress() and svc.ingress_ips != (svc.address,):
                self._publish_ingress(svc)
        for uid in [u for u in self.proxies if u not in services]:
            proxy = self.proxies.pop(uid)
            self.loop.call(proxy.close())
            self.routes.pop(uid, None)
            self.bind_errors.pop(uid, None)
            log.info("service %s: deleted; %s released", proxy.label, proxy.address)
        self.waiting = waiting
        names = frozenset((s.namespace, s.name, s.address) for s in services.values())
        if names != self.published:
            self.published = names
            self.agent.refresh_all_hosts()

    def _route(
        self,
        svc: Service,
        proxy: ServiceProxy,
        targets: dict[int, list[Target]],
        sockets: set[tuple[str, int]],
    ) -> None:
        errors = self.loop.call(proxy.apply(targets))
        if targets != self.routes.get(svc.uid):
            self.routes[svc.uid] = targets
            shown = {port: [f"{ip}:{p}" for ip, p in ts] for port, ts in targets.items()}
            log.info("service %s at %s: endpoints %s", proxy.label, svc.address, shown)
        if errors == self.bind_errors.get(svc.uid, {}):
            return
        self.bind_errors[svc.uid] = errors
        for port, error in errors.items():
            if (WILDCARD, port) in sockets:
                log.warning(
                    "service %s: port %d is bound on every address by another process; "
                    "connections to %s:%d reach it directly, not the endpoints",
                    proxy.label,
                    port,
                    svc.address,
                    port,
                )
            else:
                log.warning(
                    "service %s: cannot listen on %s:%d: %s (retrying)",
                    proxy.label,
                    svc.address,
                    port,
                    error,
                )

    def _publish_ingress(self, svc: Service) -> None:
        """What a cloud controller does once its load balancer is up."""
        body = {"status": {"loadBalancer": {"ingress": [{"ip": svc.address}]}}}
        try:
            self.agent.core.patch_namespaced_service_status(svc.name, svc.namespace, body)
        except client.ApiException as e:
            if e.status != 404:
                log.warning("service %s/%s status: %s", svc.namespace, svc.name, e.reason)
            return
        log.info("service %s/%s: load balancer ingress %s", svc.namespace, svc.name, svc.address)
        with self.lock:  # until the watch shows it, do not patch again
            if svc.uid in self.known:
                self.known[svc.uid] = replace(self.known[svc.uid], ingress_ips=(svc.address,))
