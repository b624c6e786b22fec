"""The sans-IO core: errors, typed events, the SSE codec, path detection and
rewriting, markdown links, checks of untrusted values, chunked coding, the paths an
agent reports. No trio, no HTTP library (tests/unit/test_architecture.py).
"""
