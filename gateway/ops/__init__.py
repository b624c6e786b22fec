"""The process's foundations: configuration and its schema, logs, the instance lock,
the idle memory trim, supervisor files (launchd, systemd). No HTTP.
"""
