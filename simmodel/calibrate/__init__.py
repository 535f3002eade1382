"""``simmodel calibrate``: the default performance model fitted to a user's own measured runs."""
