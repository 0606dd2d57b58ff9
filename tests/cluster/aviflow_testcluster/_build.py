"""Build the upstream binaries of the test cluster from pinned Go modules.

Everything comes from the Go module proxy, pinned by the committed ``go.mod`` /
``go.sum`` files under ``tests/cluster/go/``:

* ``go/k8s``: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
  from ``k8s.io/kubernetes`` plus etcd (``cmd/etcd`` calls ``etcdmain.Main``) from
  the same module graph;
* ``go/kueue``: ``sigs.k8s.io/kueue/cmd/kueue``;
* ``go/helm``: the ``helm`` CLI (``helm.sh/helm/v4/cmd/helm``) for the chart's tests and
  people (:func:`build_helm`, ``make helm``), version-stamped as upstream's Makefile does.

Binaries land in the build cache shared by every clone (``_cache``):
``<cache>/cluster-bin/<key>/`` and ``<cache>/helm/<key>/helm``, where ``<key>`` hashes the
module files, the build flags and the Go toolchain, so a warm start (in any clone) only
checks that the files are there. The Go module and build caches are Go's own (``go env
GOMODCACHE GOCACHE``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import _cache

HERE = Path(__file__).resolve().parent.parent  # tests/cluster
GO_DIR = HERE / "go"

K8S_VERSION = "v1.35.4"
KUEUE_VERSION = "v0.17.0"
HELM_VERSION = "v4.3.1"

K8S_COMMANDS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "etcd": "./cmd/etcd",
}
KUEUE_COMMANDS = {"kueue": "sigs.k8s.io/kueue/cmd/kueue"}
BINARIES = (*K8S_COMMANDS, *KUEUE_COMMANDS)


def _k8s_ldflags() -> str:
    major, minor = K8S_VERSION.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return " ".join(
        [
            "-s",
            "-w",
            f"-X {pkg}.gitVersion={K8S_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    )


def _kueue_ldflags() -> str:
    return f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={KUEUE_VERSION}"


def _helm_ldflags() -> str:
    # Helm 4 reads client-go's version (its default Kubernetes version) from the build info;
    # only its own version needs the stamp (else "v4.3").
    pkg = "helm.sh/helm/v4/internal/version"
    return f"-s -w -X {pkg}.version={HELM_VERSION} -X {pkg}.gitTreeState=clean"


def _go_version() -> str:
    """The toolchain's ``go version`` line: a different Go builds different binaries."""
    if shutil.which("go") is None:
        raise RuntimeError("Go toolchain not found on PATH; it is needed to build the test cluster")
    return subprocess.run(
        ["go", "version"], env=_go_env(), check=True, capture_output=True, text=True
    ).stdout.strip()


def helm_key() -> str:
    """Hash of what decides ``helm``: ``go/helm``'s module files, the flags, the toolchain."""
    return _cache.key_of(
        GO_DIR / "helm" / "go.mod", GO_DIR / "helm" / "go.sum", _helm_ldflags(), _go_version()
    )


def helm_path() -> Path:
    """Where :func:`build_helm` puts ``helm``: ``<cache>/helm/<key>/helm``."""
    return _cache.default_cache().entry("helm", helm_key()).path / "helm"


def build_helm(*, log=None) -> Path:
    """Build ``helm`` from the module proxy if needed (cached; about 5 min cold on 2 cores)
    and return its path."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))

    def make(tmp: Path) -> None:
        t0 = time.monotonic()
        log(f"building helm {HELM_VERSION} into the cache ({_cache.cache_root()}/helm)")
        cmd = ["go", "build", "-trimpath", "-buildvcs=false", f"-ldflags={_helm_ldflags()}"]
        _run([*cmd, "-o", str(tmp / "helm"), "helm.sh/helm/v4/cmd/helm"], GO_DIR / "helm", log)
        log(f"built helm in {time.monotonic() - t0:.0f}s")

    entry = _cache.default_cache().entry("helm", helm_key())
    return entry.ensure(make, log=log) / "helm"


def build_key() -> str:
    """Hash of everything that decides the binaries' contents: both modules' files, the etcd
    main, the link flags and the Go toolchain."""
    files = [GO_DIR / sub / name for sub in ("k8s", "kueue") for name in ("go.mod", "go.sum")]
    return _cache.key_of(
        *files,
        GO_DIR / "k8s" / "cmd" / "etcd" / "main.go",
        _k8s_ldflags(),
        _kueue_ldflags(),
        _go_version(),
    )


def bin_dir() -> Path:
    """``<cache>/cluster-bin/<key>``: the binaries of this checkout's pins (maybe not built)."""
    return _cache.default_cache().entry("cluster-bin", build_key()).path


def binaries_present(directory: Path | None = None) -> bool:
    d = directory or bin_dir()
    return all((d / b).is_file() and os.access(d / b, os.X_OK) for b in BINARIES)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"
    env["CGO_ENABLED"] = "0"
    env.pop("GOFLAGS", None)  # -mod=mod etc. must not override the committed go.sum
    return env


def _run(cmd: list[str], cwd: Path, log) -> None:
    log(f"+ (cd {cwd.relative_to(HERE.parent.parent)} && {' '.join(cmd)})")
    subprocess.run(cmd, cwd=cwd, env=_go_env(), check=True)


def build(*, jobs: int | None = None, force: bool = False, log=None) -> Path:
    """Build (if needed) and return the directory holding all binaries.

    Safe to call from several processes and clones at once (pytest-xdist workers, make): the
    cache entry's lock serialises builders and later callers find the result.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    entry = _cache.default_cache().entry("cluster-bin", build_key())
    if force and entry.ready():
        entry.remove()
    if binaries_present(entry.path):
        entry.touch()
        return entry.path
    jobs = (
        jobs or int(os.environ.get("AVIFLOW_CLUSTER_BUILD_JOBS", 0)) or min(2, os.cpu_count() or 1)
    )

    def make(tmp: Path) -> None:
        t0 = time.monotonic()
        log(
            f"building test-cluster binaries into {entry.path} (go build -p {jobs}; "
            "cold: tens of minutes)"
        )
        # -buildvcs=false: the consumer modules live inside Aviflow's git checkout, whose
        # status is irrelevant to the binaries (and unreadable for a foreign-owned checkout).
        common = ["go", "build", f"-p={jobs}", "-trimpath", "-buildvcs=false"]
        _run(
            [*common, f"-ldflags={_k8s_ldflags()}", "-o", str(tmp) + "/", *K8S_COMMANDS.values()],
            GO_DIR / "k8s",
            log,
        )
        _run(
            [
                *common,
                f"-ldflags={_kueue_ldflags()}",
                "-o",
                str(tmp / "kueue"),
                *KUEUE_COMMANDS.values(),
            ],
            GO_DIR / "kueue",
            log,
        )
        missing = [b for b in BINARIES if not (tmp / b).is_file()]
        if missing:
            raise RuntimeError(f"build finished without {missing}")
        log(f"built test-cluster binaries in {time.monotonic() - t0:.0f}s")

    return entry.ensure(make, log=log)


def module_dir(module: str, gomod_dir: Path) -> Path:
    """Directory of ``module`` in the Go module cache (downloading it if needed)."""
    out = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", module],
        cwd=gomod_dir,
        env=_go_env(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not out:
        subprocess.run(["go", "mod", "download", module], cwd=gomod_dir, env=_go_env(), check=True)
        return module_dir(module, gomod_dir)
    return Path(out)


def kueue_source_dir() -> Path:
    return module_dir("sigs.k8s.io/kueue", GO_DIR / "kueue")
