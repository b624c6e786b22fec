"""Background runs: their journal and lifecycle (manager), the bus that wakes
followers and stops runs across instances, and the upkeep (leases, retention).
"""
