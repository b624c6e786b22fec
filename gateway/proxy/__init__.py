"""The Open WebUI runs proxy (``gateway proxy``); see :mod:`gateway.proxy.app`."""

from gateway.fronts.openwebui import NOTE_START, private_note
from gateway.proxy.app import ProxyApp, ProxyState, create_proxy_app

__all__ = ["NOTE_START", "ProxyApp", "ProxyState", "create_proxy_app", "private_note"]
