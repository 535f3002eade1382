"""``simmodel recommend``: search deployments against latency targets."""
