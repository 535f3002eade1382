"""What arrives: request lengths, arrival processes, traces, and the process that injects requests."""
