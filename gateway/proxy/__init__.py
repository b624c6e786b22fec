"""The Open WebUI runs proxy (``gateway proxy``); see :mod:`gateway.proxy.app`."""

from gateway.fronts.openwebui import PRIVATE_NOTE
from gateway.proxy.app import ProxyApp, ProxyState, create_proxy_app

__all__ = ["PRIVATE_NOTE", "ProxyApp", "ProxyState", "create_proxy_app"]
