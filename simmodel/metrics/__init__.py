"""Event rows recorded during a run, and the tables and statistics built from them afterwards."""
