"""The local hub: ``python -m aviflow_hub.local [--config hub/local.yaml]`` (``make hub``).

Starts JupyterHub on localhost with notebooks as local processes, configurable-http-proxy
(from npm, installed by ``tools/sysdeps.sh``), the dev shared-password authenticator, the
idle culler, and aviflow-api on the local backend. :func:`hub_command` prepares the command
as data; :func:`main` only runs it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from importlib.resources import files
from pathlib import Path

from aviflow_hub.config import CONFIG_ENV, ConfigError, HubConfig, load_config

DEFAULT_CONFIG = Path("hub") / "local.yaml"


def config_file() -> Path:
    """The ``jupyterhub_config.py`` shipped in this package."""
    return Path(str(files("aviflow_hub").joinpath("jupyterhub_config.py")))


def hub_command(
    config_path: Path, python: str = sys.executable
) -> tuple[list[str], dict[str, str], Path]:
    """(argv, environment, working directory) that start the hub for ``config_path``."""
    cfg = load_config(config_path)
    env = dict(os.environ)
    env[CONFIG_ENV] = str(config_path.resolve())
    bindir = str(Path(python).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return [python, "-m", "jupyterhub", "-f", str(config_file())], env, cfg.data_path()


def welcome(cfg: HubConfig) -> str:
    users = sorted(
        {u for members in cfg.hub.groups.values() for u in members} | set(cfg.hub.admins)
    )
    url = f"http://{cfg.hub.bind}:{cfg.hub.port}"
    lines = [f"Aviflow hub on {url}", f"  users: {', '.join(users) or '(any)'}"]
    if cfg.auth.type == "dev" and cfg.auth.dev is not None:
        lines.append(
            f"  password: {cfg.auth.dev.user_password} (admins: the adminPassword in the config)"
        )
    lines.append(f"  usage report: {url}/services/aviflow-api/report")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aviflow_hub.local", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--config", type=Path, default=Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    )
    ns = parser.parse_args(argv)
    try:
        cfg = load_config(ns.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if shutil.which("configurable-http-proxy") is None:
        print(
            "configurable-http-proxy is not installed; run `bash tools/sysdeps.sh` (needs npm)",
            file=sys.stderr,
        )
        return 2
    argv_, env, cwd = hub_command(ns.config)
    cwd.mkdir(parents=True, exist_ok=True)
    print(welcome(cfg), flush=True)
    os.chdir(cwd)
    os.execvpe(argv_[0], argv_, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
