"""Pictures of a run (the ``plot`` extra: plotly): ``charts`` draws each chart from a run's tables, ``report``
writes a run folder as one self-contained HTML report (``simmodel plot``). ``docs/plots.md`` shows them."""
