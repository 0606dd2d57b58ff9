"""``Informer``: a list+watch cache of one kind of object, with resync, on the ``kubernetes``
client (the shape of client-go's informer, small).

It lists, in pages of ``page_size`` objects (``limit`` and ``continue``: the API server never
builds one answer of every object), remembering the list's ``resourceVersion``, then watches
from there; every change updates the cache and calls ``on_change(obj)``. A watch that ends is
resumed from the last version seen; ``410 Gone`` (the version is too old) or any error
relists. Every ``resync`` seconds it calls ``on_change`` for every cached object again, from
the cache (as client-go's resync does: no request), so a reconcile that failed is tried again
within that time; the caller makes that cheap for objects with nothing left to do. Objects
deleted between lists are reported once with ``obj["deleted"] = True``. An ``index`` (object
-> keys, such as the TrainJob a Job belongs to) makes :meth:`Informer.by` cost the objects it
returns, not the whole cache.

A cache that holds every object of a kind grows with the kind's history (finished TrainJobs
stay until someone deletes them), so two options keep what an object costs in line with what
its reader still does with it:

- ``transform`` (client-go's ``SetTransform``): what the cache keeps of each object, and what
  ``on_change`` is handed; applied a page at a time as a list comes in, so a list of ten
  thousand objects is never held whole;
- ``resync_key``, with an ``index``: a resync hands back only the objects indexed under that
  key (the TrainJobs not finished), costing those, not the whole cache.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("aviflow.operator")
Obj = dict[str, Any]
WATCH_SECONDS = 240
RETRY_SECONDS = 1.0
LIST_TIMEOUT = 60
PAGE_SIZE = 500


class RawWatch(watch.Watch):
    """A watch whose events carry the API server's JSON only. The client's own decodes each
    event's object a second time, into its models (a ``V1Pod``, a ``V1Job``: it finds the
    type in the list method's docstring), which the informer never reads: that was a third
    of the controller's CPU in a burst of submissions (``bench/admission.py``), on cores it
    shares with the API server. Errors are still raised as ``ApiException``."""

    def get_return_type(self, func: Callable[..., Any]) -> None:
        return None


def key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


class Informer:
    """Cache of the objects ``list_call(**kwargs)`` returns (a ``kubernetes`` list method
    that returns raw JSON with ``_preload_content=False``); see the module docstring."""

    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        on_change: Callable[[Obj], None],
        *,
        resync: float = 30.0,
        index: Callable[[Obj], Iterable[str]] | None = None,
        page_size: int = PAGE_SIZE,
        transform: Callable[[Obj], Obj] | None = None,
        resync_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        if resync_key is not None and index is None:
            raise ValueError("resync_key names a key of the index: give an index")
        self.name = name
        self.page_size = page_size
        self._list = list_call
        self._kwargs = kwargs
        self._on_change = on_change
        self._resync = resync
        self._items: dict[tuple[str, str], Obj] = {}
        self._index = index
        self._keep = transform or (lambda obj: obj)
        self._resync_key = resync_key
        self._by: dict[str, dict[tuple[str, str], Obj]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: RawWatch | None = None

    # -- reads -----------------------------------------------------------------------------------
    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._items.values())

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._items.get((namespace, name))

    def by(self, value: str) -> list[Obj]:
        """The cached objects whose ``index`` keys include ``value``."""
        with self._lock:
            return list(self._by.get(value, {}).values())

    def _put(self, k: tuple[str, str], obj: Obj | None) -> None:
        """Set (or with None remove) one object, keeping the index; the lock is held."""
        old = self._items.pop(k, None)
        if self._index is not None and old is not None:
            for value in self._index(old):
                entries = self._by.get(value)
                if entries is not None:
                    entries.pop(k, None)
                    if not entries:
                        del self._by[value]
        if obj is None:
            return
        self._items[k] = obj
        if self._index is not None:
            for value in self._index(obj):
                self._by.setdefault(value, {})[k] = obj

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    # -- running ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        """Whether its thread runs (it relists after every error, so only a bug stops it)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        version: str | None = None
        resync_at = 0.0
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                    self._synced.set()
                    resync_at = time.monotonic() + self._resync
                version = self._watch_from(version, resync_at)
                if time.monotonic() >= resync_at:
                    self._replay()
                    resync_at = time.monotonic() + self._resync
            except ApiException as exc:
                version = None
                if self._stop.is_set():
                    return
                if exc.status != 410:
                    log.warning("%s: %s %s; relisting", self.name, exc.status, exc.reason)
                    self._stop.wait(RETRY_SECONDS)
            except Exception as exc:  # the connection dropped, the server restarted...
                version = None
                if self._stop.is_set():
                    return
                log.warning("%s: %r; relisting", self.name, exc)
                self._stop.wait(RETRY_SECONDS)

    def _replay(self) -> None:
        """The resync: ``on_change`` for every cached object (those under ``resync_key``),
        from the cache."""
        key = self._resync_key
        for obj in self.items() if key is None else self.by(key):
            if self._stop.is_set():
                return
            self._on_change(obj)

    def _list_pages(self) -> tuple[list[Obj], str]:
        """Every object, a page at a time, and the version of the list (one snapshot: a
        ``continue`` that expired is a 410, and the list starts over)."""
        import json

        items: list[Obj] = []
        token: str | None = None
        while True:
            page: dict[str, Any] = {"limit": self.page_size}
            if token is not None:
                page["_continue"] = token
            resp = self._list(
                **self._kwargs, **page, _preload_content=False, _request_timeout=LIST_TIMEOUT
            )
            data = json.loads(resp.data)
            meta = data.get("metadata") or {}
            items.extend(self._keep(o) for o in data.get("items") or [])
            del data, resp  # this page's whole objects go before the next page comes
            token = meta.get("continue") or None
            if token is None:
                return items, str(meta["resourceVersion"])

    def _relist(self) -> str:
        items, version = self._list_pages()
        fresh = {key(o): o for o in items}
        with self._lock:
            gone = [o for k, o in self._items.items() if k not in fresh]
            self._items, self._by = {}, {}
            for k, o in fresh.items():
                self._put(k, o)
        for obj in gone:
            self._on_change({**obj, "deleted": True})
        for obj in fresh.values():
            self._on_change(obj)
        return version

    def _watch_from(self, version: str, deadline: float) -> str:
        self._watch = w = RawWatch()
        timeout = max(1, min(WATCH_SECONDS, int(deadline - time.monotonic())))
        for ev in w.stream(
            self._list,
            **self._kwargs,
            resource_version=version,
            timeout_seconds=timeout,
            allow_watch_bookmarks=True,
            _request_timeout=timeout + 30,  # a silent connection is dropped, then relisted
        ):
            if self._stop.is_set():
                break
            obj, kind = ev["raw_object"], ev["type"]
            if kind == "ERROR":
                raise ApiException(status=obj.get("code", 500), reason=obj.get("message", ""))
            version = obj.get("metadata", {}).get("resourceVersion", version)
            if kind == "BOOKMARK":
                continue
            obj = self._keep(obj)
            with self._lock:
                self._put(key(obj), None if kind == "DELETED" else obj)
            self._on_change({**obj, "deleted": True} if kind == "DELETED" else obj)
        return version


def api_list(api: Any, method: str) -> Callable[..., Any]:
    """``getattr(api, method)`` (for the informer), checked."""
    call = getattr(api, method, None)
    if call is None:
        raise AttributeError(f"{type(api).__name__} has no {method}")
    return call  # type: ignore[no-any-return]


__all__ = ["Informer", "RawWatch", "api_list", "client", "key"]
