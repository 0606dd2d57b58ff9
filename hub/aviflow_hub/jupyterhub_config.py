"""JupyterHub configuration for Aviflow: ``jupyterhub -f <this file>``.

It reads the one YAML config source named by ``$AVIFLOW_HUB_CONFIG`` (the Helm chart mounts
it; ``python -m aviflow_hub.local`` points at hub/local.yaml) and copies the settings
:func:`aviflow_hub.settings.hub_settings` derives from it into ``c``.
"""

import os
from pathlib import Path

from aviflow_hub.config import CONFIG_ENV, load_config
from aviflow_hub.settings import API_TOKEN_ENV, hub_settings

c = get_config()  # type: ignore[name-defined]  # noqa: F821
_path = Path(os.environ[CONFIG_ENV]).resolve()
_cfg = load_config(_path)
_data = _cfg.data_path(_path.parent)
_data.mkdir(parents=True, exist_ok=True)
_token = os.environ.get(API_TOKEN_ENV)
for _cls, _traits in hub_settings(_cfg, _path, base_dir=_path.parent, api_token=_token).items():
    for _name, _value in _traits.items():
        setattr(c[_cls], _name, _value)
