"""A pod's containers inside their images: ``ImageMixin``, the part of ``PodRunner`` that
finds each container's image in the agent's OCI layout (``ErrImagePull`` then
``ImagePullBackOff`` while it is not there, unless the agent runs in host mode) and builds
the command line that runs a container in it (``_oci``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from . import _cache, _oci
from ._agent_common import SETUP_RETRY_SECONDS, log, waiting
from ._agent_env import expand


class ImageMixin:
    """``PodRunner``'s image part; uses its ``agent``, ``spec``, ``dir``, ``name``,
    ``namespace``, ``deleting``, ``statuses``, ``init_statuses``, ``bundles``,
    ``hostname()`` and ``patch_status()``."""

    def pull_images(self) -> bool:
        """Find every container's image in the agent's OCI layouts and unpack it (once per
        layer, shared by all pods and clusters). An image that is not there: host mode runs the container
        on the host; otherwise the pod waits like the kubelet's, ``ErrImagePull`` then
        ``ImagePullBackOff``, retrying until the image appears or the pod is deleted."""
        args = self.agent.args
        containers = [*(self.spec.get("initContainers") or []), *self.spec["containers"]]
        attempt = 0
        while not self.deleting.is_set():
            missing = []
            for c in containers:
                if c["name"] in self.bundles:
                    continue
                image = c.get("image", "")
                layout, ref = _oci.locate(Path(args.images), image) if args.images else (None, "")
                try:
                    if layout is None:
                        raise _oci.ImageError("the node agent has no image layouts")
                    self.bundles[c["name"]] = _oci.unpack(
                        layout, ref, _cache.Cache(Path(args.image_cache))
                    )
                except _oci.ImageError as e:
                    if args.host_mode:
                        self.bundles[c["name"]] = None
                    else:
                        missing.append((c, f'Failed to pull image "{image}": {e}'))
            if not missing:
                return True
            reason = "ErrImagePull" if attempt == 0 else "ImagePullBackOff"
            for c, message in missing:
                if attempt:
                    message = f'Back-off pulling image "{c.get("image", "")}"'
                table = self.statuses if c in self.spec["containers"] else self.init_statuses
                table[c["name"]] = waiting(c, reason, message)
            if attempt < 2:
                log.warning("pod %s/%s: %s: %s", self.namespace, self.name, reason, missing[0][1])
                self.patch_status()
            attempt += 1
            self.deleting.wait(min(SETUP_RETRY_SECONDS * attempt, 10))
        return False

    def image_argv(
        self,
        c: dict,
        bundle: _oci.Bundle,
        env: dict[str, str],
        mounts: list[tuple[str, str, bool]],
        restart_count: int,
    ) -> list[str]:
        """A container inside its image: its own writable layer (under the pod's sandbox),
        the image's Entrypoint/Cmd/Env/WorkingDir/User with the pod's command, args, env,
        workingDir and securityContext over them, the pod's /etc/hosts and volumes."""
        image = bundle.process()
        argv = image.argv(
            [expand(a, env) for a in c.get("command") or []],
            [expand(a, env) for a in c.get("args") or []],
        )
        if not argv:
            raise ValueError(f"container {c['name']}: neither the pod nor the image has a command")
        sc = {**(self.spec.get("securityContext") or {}), **(c.get("securityContext") or {})}
        uid = sc.get("runAsUser", image.uid)
        gid = sc.get("runAsGroup", image.gid if "runAsUser" not in sc else uid)
        rw = self.dir / "containers" / f"{c['name']}-{restart_count}"
        shutil.rmtree(rw, ignore_errors=True)
        rw.mkdir(parents=True)
        binds = [(self.dir / "hosts", "/etc/hosts", False)]
        binds += [(Path(src), dst, ro) for src, dst, ro in mounts]
        return _oci.run_argv(
            bundle,
            rw,
            argv,
            env=_image_env(c, image, env),
            binds=binds,
            cwd=c.get("workingDir") or image.cwd,
            user=(int(uid), int(gid)),
            hostname=self.hostname(),
            pid_namespace=False,
        )


def _image_env(c: dict, image: _oci.ImageProcess, env: dict[str, str]) -> dict[str, str]:
    """The image's environment, then the pod's: what ``env_for`` derived from the host (PATH,
    HOME, LANG) gives way to the image's unless the container sets it itself."""
    own = {e["name"] for e in c.get("env") or []}
    merged = dict(image.env)
    for k, v in env.items():
        if k in ("PATH", "HOME", "LANG") and k not in own and k in merged:
            continue
        merged[k] = v
    return merged
