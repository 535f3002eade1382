"""``simmodel compare``: a scenario's simulated metrics beside a benchmark tool's measured ones."""
