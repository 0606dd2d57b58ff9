"""Command line: ``python -m aviflow_testcluster {build,helm,up,down,status,cache}``.

``up`` starts a cluster whose processes outlive the command and prints the
``export KUBECONFIG=...`` line; ``down`` stops it and checks no process is left.
``cache`` shows the build cache shared by every clone (``cache clean`` empties it, ``cache
evict`` keeps it within its bound; the rest is for ``images/build.sh``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import _build, _cache, _image_store, _procs
from ._cluster import Cluster


def _running(workdir: Path) -> Cluster | None:
    if not (workdir / "state.json").exists():
        return None
    c = Cluster.load(workdir)
    if c.pids and all(_procs.alive(pid) for pid in c.pids.values()):
        return c
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aviflow_testcluster")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the binaries (cached by go.sum)")
    b.add_argument("--force", action="store_true")
    sub.add_parser("helm", help="build the helm CLI (cached) and print its path")
    for name in ("up", "down", "status"):
        p = sub.add_parser(name)
        p.add_argument("--dir", type=Path, default=Path(".cluster"), help="cluster directory")
    sub.choices["up"].add_argument("--hgx-nodes", type=int, default=4)
    sub.choices["up"].add_argument("--cpu-nodes", type=int, default=2)
    sub.choices["up"].add_argument(
        "--host-mode",
        action="store_true",
        help="pods whose image is not in images/.build/oci run on the host (else ErrImagePull)",
    )
    c = sub.add_parser("cache", help="the build cache shared by every clone")
    c.add_argument(
        "action",
        nargs="?",
        default="show",
        choices=["show", "root", "clean", "evict", "seal", "images-env", "images-prune"],
    )
    c.add_argument(
        "args",
        nargs="*",
        help="seal: DIR; images-env: BASE_KEY LOCK_HASH PROXY; images-prune: [changed]",
    )
    args = ap.parse_args(argv)

    if args.cmd == "cache":
        return _cache_command(args.action, args.args)

    if args.cmd == "build":
        t0 = time.monotonic()
        print(_build.build(force=args.force))
        print(f"build step took {time.monotonic() - t0:.1f}s", file=sys.stderr)
        return 0

    if args.cmd == "helm":
        print(_build.build_helm())
        return 0

    workdir = args.dir.resolve()
    if args.cmd == "up":
        c = _running(workdir)
        if c is None:
            if (workdir / "state.json").exists():
                Cluster.load(workdir).stop()
            c = Cluster.start(
                workdir,
                hgx_nodes=args.hgx_nodes,
                cpu_nodes=args.cpu_nodes,
                host_mode=args.host_mode,
            )
        else:
            print(f"cluster already running in {workdir}", file=sys.stderr)
        print(f"export KUBECONFIG={c.kubeconfig}")
        print(f"# kubectl: {c.kubectl_path}", file=sys.stderr)
        return 0
    if args.cmd == "down":
        if not (workdir / "state.json").exists():
            print(f"no cluster in {workdir}", file=sys.stderr)
            return 0
        c = Cluster.load(workdir)
        leftovers = c.stop()
        left = c.processes()
        (workdir / "state.json").unlink(missing_ok=True)
        if left:
            print(f"processes still alive: {left}", file=sys.stderr)
            return 1
        print(
            f"cluster in {workdir} stopped"
            + (f" (swept {len(leftovers)} stray processes)" if leftovers else ""),
            file=sys.stderr,
        )
        return 0
    if args.cmd == "status":
        c = _running(workdir)
        if c is None:
            print("not running")
            return 1
        print(
            json.dumps(
                {"kubeconfig": str(c.kubeconfig), "pids": c.pids, "ports": c.ports}, indent=1
            )
        )
        return 0
    return 2


def _cache_command(action: str, args: list[str]) -> int:
    if action == "images-env":
        if len(args) != 3:
            print("cache images-env BASE_KEY LOCK_HASH PROXY_VERSION", file=sys.stderr)
            return 2
        print(_image_store.ImageStore(_cache.default_cache()).shell(*args), end="")
        return 0
    if action == "images-prune":  # [changed]: a build wrote to the stores
        log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
        store = _image_store.ImageStore(_cache.default_cache())
        _image_store.prune(store, log=log, changed=args == ["changed"])
        return 0
    return _cache.main([action, *args])


if __name__ == "__main__":
    sys.exit(main())
