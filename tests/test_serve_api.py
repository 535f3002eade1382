"""The HTTP API (``simmodel serve``): scenario runs and OpenAI-compatible estimates, through FastAPI's TestClient.

The hand-derived calls use an ``engine`` block with fixed timing (20 ms a pass with prefill work, 10 ms a decode
pass), synchronous scheduling and no request overhead, so every instant can be written out.
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from simmodel.cli import cli  # noqa: E402
from simmodel.serve.app import create_app  # noqa: E402
from simmodel.serve.workload import READY_DIR, ServeLimits  # noqa: E402

ENGINE = {"model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "h100_sxm", "context_length": 4096,
          "workers": {"aggregated": {"scheduler": {"async_scheduling": False},
                                     "kv_cache": {"capacity": {"type": "fixed", "blocks": 1000}},
                                     "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}}}}


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app())


def _fields(response) -> list[str]:
    """The fields a 422 names (``loc`` without its ``body`` head, joined with dots)."""
    return [".".join(str(part) for part in error["loc"][1:]) for error in response.json()["detail"]]


def test_the_ready_scenarios_are_listed_with_their_deployment(client):
    ready = {row["name"]: row for row in client.get("/api/scenarios/ready").json()}
    assert ready["quickstart"] == {"name": "quickstart", "model": "meta-llama/Llama-3.1-8B-Instruct",
                                   "hardware": "h100_sxm", "backend": "vllm", "mode": "aggregated"}
    assert ready["disagg-llama70b-h200"]["mode"] == "disaggregated"
    # (not listed: a search's space, a deployment that needs image traffic, one whose workers need a planner)
    assert not {"recommend-aggregated", "recommend-disaggregated", "qwen3-vl-sglang", "planner-step-load"} & set(ready)


def test_a_ready_scenario_a_call_cannot_run_is_refused_with_why(client):
    got = client.post("/api/scenarios", json={"scenario": "qwen3-vl-sglang", "num_requests": 1, "prompt_tokens": 10,
                                               "output_tokens": 2})
    assert got.status_code == 422 and _fields(got) == ["scenario"]
    assert "is not a deployment a call can run" in got.json()["detail"][0]["msg"]
    got = client.post("/v1/completions", json={"model": "recommend-aggregated", "prompt": "x"})
    assert got.status_code == 422 and _fields(got) == ["model"]


def test_explicit_requests_by_hand(client):
    """A (100 → 3) at 0: prefill 0–20 ms (first token), decodes to 30 and 40. B (100 → 2) at 50 ms on an idle
    worker: prefill 50–70, decode to 80. TTFT 20 and 20; E2E 40 and 30, so p50 35 and p99 30 + 0.99 × 10 = 39.9
    (linear interpolation); ITL p50 10; 5 tokens over the 80 ms run: 62.5 tokens/s. Ids come back as given."""
    body = {"engine": ENGINE, "requests": [
        {"id": "a", "arrival_s": 0, "prompt_tokens": 100, "output_tokens": 3},
        {"id": "b", "arrival_s": 0.05, "prompt_tokens": 100, "output_tokens": 2}]}
    got = client.post("/api/scenarios", json=body).json()
    agg = got["aggregate"]
    assert agg["ttft_ms_p50"] == pytest.approx(20) and agg["ttft_ms_p99"] == pytest.approx(20)
    assert agg["e2e_ms_p50"] == pytest.approx(35) and agg["e2e_ms_p99"] == pytest.approx(39.9)
    assert agg["itl_ms_p50"] == pytest.approx(10) and agg["output_tokens_per_s"] == pytest.approx(62.5)
    rows = {r["id"]: r for r in got["requests"]}
    assert [r["id"] for r in got["requests"]] == ["a", "b"]
    assert (rows["a"]["ttft_ms"], rows["a"]["e2e_ms"]) == pytest.approx((20, 40))
    assert (rows["b"]["ttft_ms"], rows["b"]["e2e_ms"]) == pytest.approx((20, 30))
    assert got["steps_total"] == 5 and not got["steps_downsampled"]  # (A: 3 passes, B: 2)
    assert [s["start_s"] for s in got["steps"]] == pytest.approx([0, 0.02, 0.03, 0.05, 0.07])
    assert got["scheduler"]["aggregated"]["max_num_seqs"] == 256
    assert got["provenance_counts"] == {"fixed": 5}


def test_scheduler_overrides_and_default_ids(client):
    """max_num_seqs 1: two 100 → 3 requests at 0 run one after the other: the second is admitted when the first
    finishes (40 ms), prefills to 60: TTFT 60 ms. Shorthand ids are request-0, request-1."""
    body = {"engine": ENGINE, "num_requests": 2, "prompt_tokens": 100, "output_tokens": 3,
            "scheduler": {"max_num_seqs": 1}}
    got = client.post("/api/scenarios", json=body).json()
    assert [r["id"] for r in got["requests"]] == ["request-0", "request-1"]
    assert [r["ttft_ms"] for r in got["requests"]] == pytest.approx([20, 60])
    assert got["scheduler"]["aggregated"]["max_num_seqs"] == 1


def test_shorthand_arrivals_at_a_rate(client):
    """arrival_rate_rps 10: the i-th request arrives at i / 10 s; each 100 → 2 request is alone (30 ms): TTFT 20."""
    body = {"engine": ENGINE, "num_requests": 3, "prompt_tokens": 100, "output_tokens": 2, "arrival_rate_rps": 10}
    got = client.post("/api/scenarios", json=body).json()
    assert [r["arrival_s"] for r in got["requests"]] == pytest.approx([0, 0.1, 0.2])
    assert [r["first_token_s"] for r in got["requests"]] == pytest.approx([0.02, 0.12, 0.22])


def test_the_shorthand_equals_simmodel_run_of_the_same_scenario(client, tmp_path):
    """8 × 512 → 128 at zero on the quickstart deployment: the aggregate is the summary ``simmodel run`` gives for
    the quickstart with those 8 requests as a trace."""
    got = client.post("/api/scenarios", json={"scenario": "quickstart", "num_requests": 8, "prompt_tokens": 512,
                                               "output_tokens": 128}).json()["aggregate"]
    data = yaml.safe_load((READY_DIR / "quickstart.yaml").read_text())
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n" + "0.0,512,128\n" * 8)
    data["traffic"] = {"source": {"type": "trace", "path": str(tmp_path / "t.csv"), "format": "csv"},
                       "load": {"type": "trace_timestamps"}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert CliRunner().invoke(cli, ["run", "-c", str(tmp_path / "s.yaml"), "--output-dir", str(out),
                                    "--quiet"]).exit_code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert got["ttft_ms_p50"] == summary["ttft_ms"]["p50"] and got["ttft_ms_p99"] == summary["ttft_ms"]["p99"]
    assert got["itl_ms_p50"] == summary["itl_ms"]["p50"]
    assert got["e2e_ms_p99"] == summary["e2e_latency_ms"]["p99"]
    assert got["output_tokens_per_s"] == summary["output_throughput_tok_s"]


def test_one_request_at_zero_agrees_with_simmodel_estimate(client):
    """A completion of 512 prompt tokens (a prompt of 2,048 ASCII bytes, counted as bytes / 4) and 128 out on
    the quickstart deployment agrees with ``simmodel estimate`` of that request alone to 1e-6 relative."""
    got = client.post("/v1/completions", json={"model": "quickstart", "prompt": "abcd" * 512, "max_tokens": 128})
    timing = got.json()["simmodel"]
    assert timing["prompt_tokens"] == 512 and timing["prompt_token_source"] == "estimated:utf8-bytes/4"
    result = CliRunner().invoke(cli, ["estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--hardware",
                                      "h100_sxm", "--context-length", "16384", "--input-tokens", "512",
                                      "--output-tokens", "128", "--format", "json"])
    estimate = json.loads(result.output)
    assert timing["ttft_ms"] == pytest.approx(estimate["ttft_ms"], rel=1e-6)
    assert timing["e2e_ms"] == pytest.approx(estimate["e2e_ms"], rel=1e-6)
    assert timing["itl_ms_mean"] == pytest.approx(estimate["mean_itl_ms"], rel=1e-6)


def test_completion_and_chat_shapes(client):
    """The placeholder text has one word per output token and is the same for the same seed; usage counts the
    prompt (chat: messages joined with newlines, 11 bytes → 3 tokens) and the output."""
    first = client.post("/v1/completions", json={"model": "quickstart", "prompt": "hi", "max_tokens": 4,
                                                  "seed": 7}).json()
    again = client.post("/v1/completions", json={"model": "quickstart", "prompt": "hi", "max_tokens": 4,
                                                  "seed": 7}).json()
    assert first["object"] == "text_completion" and first["choices"][0]["text"] == again["choices"][0]["text"]
    assert len(first["choices"][0]["text"].split()) == 4
    assert first["usage"] == {"prompt_tokens": 1, "completion_tokens": 4, "total_tokens": 5}
    chat = client.post("/v1/chat/completions", json={
        "model": "quickstart", "max_completion_tokens": 3,
        "messages": [{"role": "system", "content": "be"}, {"role": "user", "content": "brief!!"}]}).json()
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    assert chat["simmodel"]["output_tokens"] == 3


def test_a_streamed_completion_ends_with_the_estimate_and_done(client):
    with client.stream("POST", "/v1/chat/completions", json={
            "model": "quickstart", "max_tokens": 2, "stream": True,
            "messages": [{"role": "user", "content": "hello"}]}) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: "):]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert [c["choices"][0]["delta"].get("content") is not None for c in chunks[1:-1]] == [True, True]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["simmodel"]["output_tokens"] == 2


def test_steps_above_5000_rows_are_sampled_keeping_the_first_and_last(client):
    """One request of 6,000 output tokens: 6,000 passes (its prefill samples the first token), sampled to 5,000
    rows, the first (index 0) and the last (index 5,999) kept; the aggregate uses every pass."""
    got = client.post("/api/scenarios", json={"engine": {**ENGINE, "context_length": 8192}, "num_requests": 1,
                                               "prompt_tokens": 10, "output_tokens": 6000}).json()
    assert got["steps_total"] == 6000 and got["steps_returned"] == 5000 and got["steps_downsampled"]
    assert got["steps"][0]["index"] == 0 and got["steps"][-1]["index"] == 5999
    assert got["requests"][0]["e2e_ms"] == pytest.approx(20 + 5999 * 10)


@pytest.mark.parametrize("body, field", [
    ({"engine": ENGINE, "scenario": "quickstart", "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1}, ""),
    ({"num_requests": 1, "prompt_tokens": 1, "output_tokens": 1}, ""),
    ({"engine": ENGINE, "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1,
      "requests": [{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}]}, ""),
    ({"engine": ENGINE, "requests": [{"id": "x", "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1},
                                     {"id": "x", "arrival_s": 1, "prompt_tokens": 1, "output_tokens": 1}]},
     "requests.1.id"),
    ({"engine": ENGINE, "requests": [{"arrival_s": -1, "prompt_tokens": 1, "output_tokens": 1}]},
     "requests.0.arrival_s"),
    ({"engine": ENGINE, "requests": [{"arrival_s": 0, "prompt_tokens": 4000, "output_tokens": 200}]},
     "requests.0.prompt_tokens"),
    ({"scenario": "nope", "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1}, "scenario"),
    ({"engine": {**ENGINE, "hardware": "tpu"}, "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1},
     "engine.hardware"),
    ({"engine": {**ENGINE, "hardware": "/etc/passwd"}, "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1},
     "engine.hardware"),
    ({"engine": {**ENGINE, "context_length": "long"}, "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1},
     "engine"),
    ({"engine": ENGINE, "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1,
      "scheduler": {"max_num_batched_tokens": 8}}, "scheduler"),
    ({"engine": ENGINE, "num_requests": True, "prompt_tokens": 1, "output_tokens": 1}, "num_requests"),
    ({"engine": ENGINE, "num_requests": 1, "prompt_tokens": 4000, "output_tokens": 200}, "prompt_tokens"),
    ({"engine": ENGINE, "requests": [{"id": "", "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}]},
     "requests.0.id"),
    ({"engine": ENGINE, "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1, "colour": "red"}, "colour"),
])
def test_bad_calls_are_422_naming_the_field(client, body, field):
    response = client.post("/api/scenarios", json=body)
    assert response.status_code == 422
    assert field in _fields(response)


def test_the_server_s_limits_refuse_a_call_instead_of_running_it():
    """At most 2 requests, 300 tokens and 10 passes a call: a third request, a fourth 100-token pair and a run of
    more passes are each refused with 422."""
    small = TestClient(create_app(limits=ServeLimits(max_requests=2, max_total_tokens=300, max_passes=10)))
    base = {"engine": ENGINE, "prompt_tokens": 100, "output_tokens": 2}
    assert small.post("/api/scenarios", json={**base, "num_requests": 3}).status_code == 422
    assert "num_requests" in _fields(small.post("/api/scenarios", json={**base, "num_requests": 2,
                                                                          "prompt_tokens": 200}))
    long_run = small.post("/api/scenarios", json={**base, "num_requests": 1, "output_tokens": 50})
    assert long_run.status_code == 422 and "more than 10 passes" in long_run.json()["detail"][0]["msg"]
    explicit = [{"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 2}] * 3
    assert _fields(small.post("/api/scenarios", json={"engine": ENGINE, "requests": explicit})) == ["requests"]
    assert small.post("/api/scenarios", json={**base, "num_requests": 2}).status_code == 200


def test_conflicting_lengths_and_unknown_models_are_refused(client):
    both = client.post("/v1/completions", json={"model": "quickstart", "prompt": "x", "max_tokens": 3,
                                                 "max_completion_tokens": 4})
    assert both.status_code == 422 and "disagree" in both.text
    assert _fields(client.post("/v1/completions", json={"model": "gpt-9", "prompt": "x"})) == ["model"]
    assert _fields(client.post("/v1/chat/completions", json={"model": "quickstart"})) == ["messages"]


def test_a_token_guards_every_route():
    guarded = TestClient(create_app(token="s3cret"))
    assert guarded.get("/api/scenarios/ready").status_code == 401
    assert guarded.get("/api/scenarios/ready", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert guarded.get("/api/scenarios/ready", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert guarded.post("/v1/completions", json={"model": "quickstart", "prompt": "x"}).status_code == 401


def test_simmodel_serve_binds_to_loopback_with_the_token_from_the_environment(monkeypatch):
    """``simmodel serve`` hands uvicorn an app on 127.0.0.1:8000 by default; SIMMODEL_API_TOKEN guards it."""
    import uvicorn

    started = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port: started.update(app=app, host=host, port=port))
    result = CliRunner().invoke(cli, ["serve"], env={"SIMMODEL_API_TOKEN": "t0k"})
    assert result.exit_code == 0, result.output
    assert (started["host"], started["port"]) == ("127.0.0.1", 8000)
    app = TestClient(started["app"])
    assert app.get("/api/scenarios/ready").status_code == 401
    assert app.get("/api/scenarios/ready", headers={"Authorization": "Bearer t0k"}).status_code == 200


def test_the_prompt_is_counted_by_the_model_s_tokenizer_when_there_is_one(monkeypatch):
    """A tokenizer found locally counts the prompt (here one token per word); a chat goes through its chat
    template (here the words plus 2 tokens per message), or, if the template refuses, the messages joined with
    newlines; without one, UTF-8 bytes / 4, rounded up ("héllo": 6 bytes → 2)."""
    from simmodel.serve import openai

    class Words:
        def __init__(self, template: bool) -> None:
            self.template = template

        def encode(self, text):
            return text.split()

        def apply_chat_template(self, messages, **_):
            if not self.template:
                raise ValueError("no template")
            return [w for m in messages for w in ["<m>", *m["content"].split(), "</m>"]]

    chat = [{"role": "user", "content": "one two"}, {"role": "user", "content": "three"}]
    monkeypatch.setattr(openai, "_local_tokenizer", lambda model: Words(template=True))
    assert openai.count_prompt("m", "a b c", None) == (3, "tokenizer")
    assert openai.count_prompt("m", None, chat) == (7, "tokenizer:chat_template")
    monkeypatch.setattr(openai, "_local_tokenizer", lambda model: Words(template=False))
    assert openai.count_prompt("m", None, chat) == (3, "tokenizer:joined")
    monkeypatch.setattr(openai, "_local_tokenizer", lambda model: None)
    assert openai.count_prompt("m", "héllo", None) == (2, "estimated:utf8-bytes/4")
    assert openai.count_prompt("m", "", None) == (1, "estimated:utf8-bytes/4")



def test_a_huge_call_is_refused_before_anything_is_built(client):
    """A billion requests (the most a count may say) are refused by the limit at once; a count beyond that by
    the body's own rule."""
    got = client.post("/api/scenarios", json={"engine": ENGINE, "num_requests": 10**9, "prompt_tokens": 1,
                                               "output_tokens": 1})
    assert got.status_code == 422 and _fields(got) == ["num_requests"]
    assert client.post("/api/scenarios", json={"engine": ENGINE, "num_requests": 10**20, "prompt_tokens": 1,
                                                "output_tokens": 1}).status_code == 422


@pytest.mark.parametrize("text, field", [
    ('{"engine": {}, "requests": [{"arrival_s": NaN, "prompt_tokens": 1, "output_tokens": 1}]}', "requests.0.arrival_s"),
    ('{"engine": {}, "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1, "arrival_rate_rps": Infinity}',
     "arrival_rate_rps"),
])
def test_non_finite_numbers_are_422_not_a_server_error(client, text, field):
    got = client.post("/api/scenarios", content=text, headers={"Content-Type": "application/json"})
    assert got.status_code == 422 and field in _fields(got)


@pytest.mark.parametrize("body, message", [
    ({"model": "quickstart", "prompt": "x", "n": 2}, "n is 2"),
    ({"model": "quickstart", "prompt": ["a", "b"]}, "holds 2 prompts"),
    ({"model": "quickstart", "prompt": ""}, "prompt is empty"),
    ({"model": "quickstart", "messages": []}, "at least 1 item"),
    ({"model": "quickstart", "prompt": "x", "seed": 1.5}, "valid integer"),
])
def test_openai_fields_simmodel_cannot_honour_are_refused(client, body, message):
    got = client.post("/v1/chat/completions" if "messages" in body else "/v1/completions", json=body)
    assert got.status_code == 422 and message in got.text


def test_a_streamed_completion_may_end_with_its_usage(client):
    with client.stream("POST", "/v1/completions", json={"model": "quickstart", "prompt": "abcdefgh", "max_tokens": 2,
                                                        "stream": True, "stream_options": {"include_usage": True}}) as r:
        lines = [line for line in r.iter_lines() if line]
    usage = json.loads(lines[-2][len("data: "):])
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}


def test_the_token_is_checked_before_the_body_and_its_scheme_in_any_case():
    guarded = TestClient(create_app(token="s3cret"))
    assert guarded.post("/api/scenarios", content="{not json", headers={"Content-Type": "application/json"}
                        ).status_code == 401
    assert guarded.get("/api/catalog", headers={"Authorization": "bearer s3cret"}).status_code == 200
    assert guarded.get("/").status_code == 200 and guarded.get("/openapi.json").status_code == 200


def test_the_assumptions_count_a_worker_s_gpus():
    """disagg-llama70b-h200: prefill workers of tensor 4 (the pool holds several)."""
    got = TestClient(create_app()).post("/api/scenarios", json={"scenario": "disagg-llama70b-h200", "num_requests": 1,
                                                                "prompt_tokens": 100, "output_tokens": 2}).json()
    prefill = [a for a in got["assumptions"] if a.startswith("prefill:")][0]
    assert "4 GPU(s) a worker" in prefill


def test_concurrent_calls_never_share_a_batch(client):
    """Four calls at once, each of two 100 → 3 requests at zero on fixed timing: each answers as a lone call does
    (TTFT 20 ms for both: one prefill pass of the call's own two prompts), not as one batch of eight."""
    import concurrent.futures

    body = {"engine": ENGINE, "num_requests": 2, "prompt_tokens": 100, "output_tokens": 3}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: client.post("/api/scenarios", json=body).json(), range(4)))
    for got in answers:
        assert [r["ttft_ms"] for r in got["requests"]] == pytest.approx([20, 20])
        assert got["steps_total"] == 3  # (the call's own three passes: a prefill, two decodes)


def test_instants_come_back_on_the_caller_s_clock(client):
    """Requests at 5 s and 7 s (fixed timing, each alone): first tokens at 5.02 and 7.02 s, the first pass from
    5 s (the run itself starts at the first arrival)."""
    got = client.post("/api/scenarios", json={"engine": ENGINE, "requests": [
        {"id": "a", "arrival_s": 5, "prompt_tokens": 10, "output_tokens": 2},
        {"id": "b", "arrival_s": 7, "prompt_tokens": 10, "output_tokens": 2}]}).json()
    assert [r["first_token_s"] for r in got["requests"]] == pytest.approx([5.02, 7.02])
    assert [r["finish_s"] for r in got["requests"]] == pytest.approx([5.03, 7.03])
    assert got["steps"][0]["start_s"] == pytest.approx(5.0)
    spread = client.post("/api/scenarios", json={"engine": ENGINE, "requests": [
        {"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2},
        {"arrival_s": 5e8, "prompt_tokens": 10, "output_tokens": 2}]})
    assert spread.status_code == 200 and spread.json()["requests"][1]["first_token_s"] == pytest.approx(5e8 + 0.02)


@pytest.mark.parametrize("body, field", [
    ({"engine": {**ENGINE, "model": ["a"]}, "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1},
     "engine.model"),
    ({"engine": {**ENGINE, "hardware": {"x": 1}}, "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1},
     "engine.hardware"),
    ({"engine": {**ENGINE, "workers": {"aggregated": {"scheduler": json.loads("[" * 40 + "1" + "]" * 40)}}},
      "num_requests": 1, "prompt_tokens": 1, "output_tokens": 1}, "engine"),
    ({"engine": ENGINE, "num_requests": 2, "prompt_tokens": 1, "output_tokens": 1, "arrival_rate_rps": 1e-300},
     "arrival_rate_rps"),
    ({"engine": ENGINE, "requests": [{"arrival_s": "1", "prompt_tokens": 1, "output_tokens": 1}]},
     "requests.0.arrival_s"),
])
def test_odd_values_are_422_naming_the_field(client, body, field):
    got = client.post("/api/scenarios", json=body)
    assert got.status_code == 422 and field in _fields(got)


def test_text_that_is_not_text_is_422_and_a_long_echo_is_cut(client):
    surrogate = '{"engine": {}, "requests": [{"id": "\\ud800", "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}]}'
    got = client.post("/api/scenarios", content=surrogate, headers={"Content-Type": "application/json"})
    assert got.status_code == 422 and "requests.0.id" in _fields(got)
    chat = client.post("/v1/chat/completions", content='{"model": "quickstart", "messages": [{"role": "user", '
                                                         '"content": "\\ud800"}]}',
                       headers={"Content-Type": "application/json"})
    assert chat.status_code == 200 and chat.json()["usage"]["prompt_tokens"] == 1  # (3 bytes as UTF-8 would be)
    long = client.post("/api/scenarios", json={"scenario": "x" * 100_000, "colour": "y" * 100_000})
    assert long.status_code == 422 and len(long.content) < 5_000
    unknown = client.post("/api/scenarios", json={"scenario": "nope", "num_requests": 1, "prompt_tokens": 1,
                                                  "output_tokens": 1})
    assert "recommend-aggregated" not in unknown.json()["detail"][0]["msg"]


def test_chat_messages_as_openai_sends_them(client):
    """Text parts are joined (12 bytes → 3 tokens); an assistant's tool call with no content counts nothing; n
    null is one completion; messages without any text, and n 2, are 422 naming their field."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "abcdef"}, {"type": "text", "text": "ghijkl"}]},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "t", "type": "function"}]}]
    got = client.post("/v1/chat/completions", json={"model": "quickstart", "messages": messages, "n": None,
                                                    "max_tokens": 2})
    assert got.status_code == 200 and got.json()["usage"]["prompt_tokens"] == 4  # ("abcdefghijkl\n": 13 bytes)
    empty = client.post("/v1/chat/completions", json={"model": "quickstart", "messages": [{"role": "user",
                                                                                        "content": ""}]})
    assert empty.status_code == 422 and _fields(empty) == ["messages"]
    assert _fields(client.post("/v1/completions", json={"model": "quickstart", "prompt": "x", "n": 2})) == ["n"]
