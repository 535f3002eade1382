"""Scenario files: the frozen schema, the loader that validates them (``load.py``, with one parser module per
part of a scenario), and the files a scenario may name (calibrations, benchmark tools' workloads, the built-in
traces). It knows nothing of how a scenario is run: nothing here imports the engine, traffic, calibrate,
metrics or the simulation (``tests/unit/test_import_layers.py``)."""
