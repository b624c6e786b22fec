"""The API server: the app, its state, routes, metrics, the OpenAPI document, the
self-test, and the requests going upstream (history).
"""
