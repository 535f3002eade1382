"""Serving simmodel over HTTP (``simmodel serve``, the ``serve`` extra: FastAPI, uvicorn, pydantic).

``workload`` turns a call into a scenario, ``run`` simulates it, ``results`` and ``openai`` shape the answers,
``app`` is the FastAPI application (``create_app``). ``docs/serve.md`` describes the API.
"""
