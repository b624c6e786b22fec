"""What belongs to a principal besides its files: bearer keys and the proxy's
assertions (auth), quotas, sessions.
"""
