#!/usr/bin/env python3
"""Record golden traces from vLLM 0.32.0's real v1 scheduler with prefix caching and/or async scheduling.

Regenerate (from the repo root, /work/main; vLLM venv as in ``record_vllm_goldens.py``):

    /work/venv-vllm/bin/python tools/oracles/record_vllm_goldens_apc.py            # both sets
    /work/venv-vllm/bin/python tools/oracles/record_vllm_goldens_apc.py apc        # one set: apc | async

Writes ``tests/golden/vllm_apc/<name>.json`` (sync engine, ``enable_prefix_caching``) and
``tests/golden/vllm_async/<name>.json`` (``async_scheduling``, with and without prefix caching).
The streams come from fixed seeds: two runs give byte-identical files.

Driver. The engine loop is the oracle's own ``run()`` (``../shared/oracles/vllm_sched_oracle.py``,
imported, not copied; override its folder with ``VLLM_ORACLE_DIR``): sync ``S0 U0 S1 U1 ...`` or,
with ``async_scheduling``, vLLM's ``step_with_batch_queue`` with a batch queue of 2
(``S0 S1 U0 S2 U1 ...``). To get prefix-cache hits from vLLM itself, the scheduler that
``build_scheduler`` returns is wrapped: after each ``Scheduler.schedule()`` the wrapper reads, from
the ``SchedulerOutput``, ``scheduled_new_reqs[i].num_computed_tokens`` of each newly admitted
request and ``scheduled_cached_reqs.num_computed_tokens`` of each resumed one (Model Runner V2
lists resumed requests among the new ones; either way the value is the request's
``num_computed_tokens`` at schedule time, before ``_update_after_schedule`` adds the scheduled
chunk, i.e. the tokens found in the prefix cache). The wrapper cross-checks it against
``request.num_computed_tokens - num_scheduled_tokens`` after ``schedule()``. The oracle emits one
record per ``schedule()`` call in call order (also in async mode, where the batch queue is FIFO),
so the i-th hit record belongs to the i-th trace record.

Prompts. Requests with shared prefixes carry ``segments``: ``[[seed, length], ...]``, concatenated.
A segment with ``seed >= 0`` holds tokens ``100 + crc32(b"<seed>:<i>") % 30000`` for i < length;
a segment with ``seed < 0`` holds ``length`` copies of token ``-seed`` (``[-7, n]`` repeats the
oracle's sampled token 7, so a follow-up turn can carry a previous turn's output). Requests without
``segments`` get the oracle's default crc32(id) pattern. ``prompt_crc`` is ``crc32`` of the prompt
ids (little-endian int32), so a reader can check that it rebuilt them exactly
(``tests/unit/test_vllm_golden.py`` does).

A golden file is compact JSON, one record per line:
    {"name", "vllm_version", "config": {block_size, num_gpu_blocks (incl. vLLM's null block),
     max_num_seqs, max_num_batched_tokens, max_model_len, enable_chunked_prefill,
     long_prefill_token_threshold, reserve_full_isl, enable_prefix_caching, async_scheduling},
     "requests": [{id, arrival_step, prompt_tokens, output_tokens[, segments, prompt_crc]}, ...],
     "steps": [{step, scheduled {id: n}, preempted [ids], finished [ids], emitted {id: n},
                hits {id: tokens found in the prefix cache, for each request admitted or resumed
                      in that pass, 0 included}}, ...],
     "summary": {id: {emitted_tokens, num_preemptions, finish_step, hit_tokens (sum of hits over
                 all admissions and resumptions), first_hit (hits at first admission)}}}
Records where nothing was scheduled, preempted, emitted or finished are dropped (vLLM's trailing
empty ``schedule()`` calls, and in async mode the empty passes while a finishing request's last
output is in flight).
"""

from __future__ import annotations

import io
import json
import os
import random
import struct
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_io import vllm_oracle_config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ORACLE_DIR = Path(os.environ.get("VLLM_ORACLE_DIR", REPO.parent / "shared" / "oracles"))
OUT_DIRS = {"apc": REPO / "tests" / "golden" / "vllm_apc", "async": REPO / "tests" / "golden" / "vllm_async"}

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_vllm_goldens import cdiv, dump, stream  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Prompt token ids from compact segments (tests/unit/test_vllm_golden.py rebuilds them the same way)
# ---------------------------------------------------------------------------------------------

def segment_tokens(seed: int, length: int) -> list[int]:
    if seed < 0:
        return [-seed] * length
    return [100 + zlib.crc32(f"{seed}:{i}".encode()) % 30000 for i in range(length)]


def prompt_ids(segments: list[list[int]]) -> list[int]:
    out: list[int] = []
    for seed, length in segments:
        out.extend(segment_tokens(seed, length))
    return out


def prompt_crc(ids: list[int]) -> int:
    return zlib.crc32(struct.pack(f"<{len(ids)}i", *ids))


def seg_len(segments) -> int:
    return sum(n for _, n in segments)


def trim(segments: list[list[int]], length: int) -> list[list[int]]:
    """The first ``length`` tokens of the segments."""
    out, left = [], length
    for seed, n in segments:
        if left <= 0:
            break
        out.append([seed, min(n, left)])
        left -= n
    return [s for s in out if s[1] > 0]


def extend(segments: list[list[int]], seed: int, n: int) -> list[list[int]]:
    return [list(s) for s in segments] + ([[seed, n]] if n > 0 else [])


# ---------------------------------------------------------------------------------------------
# Request streams with prefix sharing
# ---------------------------------------------------------------------------------------------

def _arrival(rng: random.Random, i: int, n: int, arrivals: str, span: int, bursts, t: list[float]) -> int:
    if arrivals == "burst":
        return 0
    if arrivals == "spread":
        return rng.randrange(span)
    if arrivals == "bursts":
        return rng.choice(bursts)
    if arrivals == "poisson":
        t[0] += rng.expovariate(n / span)
        return int(t[0])
    if arrivals == "sparse":
        return i * span
    raise ValueError(arrivals)


def shared_requests(seed: int, n: int, *, block_size: int, output: tuple[int, int], groups: int = 4,
                    prefix: tuple[int, int] = (16, 128), subgroups: int = 0, subprefix: tuple[int, int] = (8, 48),
                    suffix: tuple[int, int] = (1, 64), dup: float = 0.0, aligned: float = 0.0,
                    zipf: float = 0.0, prefix_of: float = 0.0, arrivals: str = "spread", span: int = 50,
                    bursts: tuple[int, ...] = (0,), max_model_len: int | None = None) -> list[dict]:
    """``n`` requests drawn from ``groups`` shared system prompts (lengths fixed per group, drawn from
    ``prefix``), optionally a second shared level (``subgroups`` per group), then a unique suffix.

    dup: probability to repeat an earlier request's prompt exactly. prefix_of: probability to take a
    strict prefix of an earlier prompt (its hit is capped at num_tokens - 1). aligned: probability to
    pad the unique suffix so the prompt is a multiple of ``block_size`` (a full hit must then
    recompute a whole block). zipf > 0 skews the group choice (group k has weight 1 / (k+1)^zipf).
    """
    rng = random.Random(seed)
    base = seed * 1000
    glen = [rng.randint(*prefix) for _ in range(groups)]
    slen = {(g, s): rng.randint(*subprefix) for g in range(groups) for s in range(subgroups)}
    weights = [1.0 / (k + 1) ** zipf for k in range(groups)]
    reqs, t = [], [0.0]
    for i in range(n):
        r = rng.random()
        if reqs and r < dup:
            segs = [list(s) for s in rng.choice(reqs)["segments"]]
        elif reqs and r < dup + prefix_of:
            src = rng.choice(reqs)["segments"]
            segs = trim(src, rng.randint(1, max(1, seg_len(src) - 1)))
        else:
            g = rng.choices(range(groups), weights)[0]
            segs = [[base + g, glen[g]]]
            if subgroups:
                s = rng.randrange(subgroups)
                segs.append([base + 100 + g * subgroups + s, slen[(g, s)]])
            u = rng.randint(*suffix)
            if rng.random() < aligned:
                u += (-(seg_len(segs) + u)) % block_size
            segs = extend(segs, base + 500 + i, u)
        if max_model_len is not None and seg_len(segs) > max_model_len - 1:
            segs = trim(segs, max_model_len - 1)
        o = rng.randint(*output)
        a = _arrival(rng, i, n, arrivals, span, bursts, t)
        reqs.append({"id": f"r{i}", "arrival_step": a, "segments": segs, "output_tokens": o})
    rng.shuffle(reqs)
    reqs.sort(key=lambda r: r["arrival_step"])
    return reqs


def cycling_requests(seed: int, n: int, *, block_size: int, num_prefixes: int, prefix_blocks: tuple[int, int],
                     suffix: tuple[int, int], output: tuple[int, int], order: str = "cycle", arrivals="poisson",
                     span: int = 100, bursts=(0,)) -> list[dict]:
    """LRU pressure: ``num_prefixes`` distinct block-aligned prefixes revisited in a cycle (or at random),
    more of them than the pool holds, so cached blocks are evicted and some come back partly evicted."""
    rng = random.Random(seed)
    base = seed * 1000
    plen = [rng.randint(*prefix_blocks) * block_size for _ in range(num_prefixes)]
    reqs, t = [], [0.0]
    for i in range(n):
        p = i % num_prefixes if order == "cycle" else rng.randrange(num_prefixes)
        segs = extend([[base + p, plen[p]]], base + 500 + i, rng.randint(*suffix))
        a = _arrival(rng, i, n, arrivals, span, bursts, t)
        reqs.append({"id": f"r{i}", "arrival_step": a, "segments": segs, "output_tokens": rng.randint(*output)})
    rng.shuffle(reqs)
    reqs.sort(key=lambda r: r["arrival_step"])
    return reqs


def multiturn_requests(seed: int, conversations: int, turns: int, *, first: tuple[int, int],
                       user: tuple[int, int], output: tuple[int, int], gap: tuple[int, int], span: int,
                       system: int = 0, max_model_len: int | None = None) -> list[dict]:
    """Chats: turn t's prompt is turn t-1's prompt, its output (token 7, as the oracle samples) and a new
    user message; it arrives ``gap`` steps after turn t-1 arrived (which may or may not have finished).
    ``system`` > 0 gives every conversation the same system prompt of that length."""
    rng = random.Random(seed)
    base = seed * 1000
    reqs = []
    k = 0
    for c in range(conversations):
        segs = [[base, system]] if system else []
        segs = extend(segs, base + 500 + k, rng.randint(*first))
        a = rng.randrange(span)
        for _ in range(turns):
            o = rng.randint(*output)
            if max_model_len is not None and seg_len(segs) + 1 > max_model_len:
                break
            reqs.append({"id": f"c{c}t{len(reqs)}", "arrival_step": a, "segments": segs, "output_tokens": o})
            k += 1
            segs = extend(extend(segs, -7, o), base + 500 + k, rng.randint(*user))
            a += rng.randint(*gap)
    for i, r in enumerate(reqs):
        r["id"] = f"r{i}"
    rng.shuffle(reqs)
    reqs.sort(key=lambda r: r["arrival_step"])
    return reqs


def finalize(reqs: list[dict]) -> list[dict]:
    """Put the fields in file order, add prompt_tokens and prompt_crc."""
    out = []
    for r in reqs:
        ids = prompt_ids(r["segments"])
        out.append({"id": r["id"], "arrival_step": r["arrival_step"], "prompt_tokens": len(ids),
                    "output_tokens": r["output_tokens"], "segments": r["segments"], "prompt_crc": prompt_crc(ids)})
    return out


def apc_stream(name, reqs, *, block_size, usable=None, kv_factor=None, max_num_seqs=256, budget=8192,
               max_model_len=None, chunked=True, lpt=0, reserve_full_isl=True, async_scheduling=False):
    reqs = finalize(reqs)
    mml = max_model_len or max(r["prompt_tokens"] + r["output_tokens"] for r in reqs)
    assert all(0 < r["prompt_tokens"] < mml for r in reqs), name
    need = max(cdiv(min(r["prompt_tokens"] + r["output_tokens"], mml), block_size) for r in reqs)
    if usable is None:
        usable = max(need, int(need * kv_factor)) if kv_factor else 100_000
    assert usable >= need, (name, usable, need)
    if not chunked:
        budget = max(budget, mml)
    assert budget >= max_num_seqs, name
    cfg = {
        "block_size": block_size, "num_gpu_blocks": usable + 1, "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": budget, "max_model_len": mml, "enable_chunked_prefill": chunked,
        "long_prefill_token_threshold": lpt, "reserve_full_isl": reserve_full_isl,
        "enable_prefix_caching": True, "async_scheduling": async_scheduling,
    }
    return name, cfg, reqs


def plain_stream(name, seed, *, async_scheduling=True, enable_prefix_caching=False, **kw):
    """``record_vllm_goldens.stream`` (crc32-pattern prompts) with the async / caching switches."""
    name, cfg, reqs = stream(name, seed, **kw)
    cfg["enable_prefix_caching"] = enable_prefix_caching
    cfg["async_scheduling"] = async_scheduling
    return name, cfg, reqs


def apc_streams() -> list[tuple[str, dict, list[dict]]]:
    S = shared_requests
    return [
        # Shared system prompts, loose KV: hits only, no preemption.
        apc_stream("groups_bs16_loose", S(1001, 50, block_size=16, output=(1, 32), groups=4, prefix=(20, 140),
                                          suffix=(1, 60), arrivals="spread", span=60),
                   block_size=16, max_num_seqs=32, budget=512),
        apc_stream("groups_tree_bs32", S(1002, 48, block_size=32, output=(1, 24), groups=3, prefix=(40, 130),
                                         subgroups=3, subprefix=(10, 70), suffix=(1, 50), arrivals="poisson",
                                         span=60),
                   block_size=32, max_num_seqs=24, budget=384),
        # Exact duplicates arriving together: same-pass hits on blocks cached at schedule time.
        apc_stream("dups_burst_bs16", S(1003, 40, block_size=16, output=(1, 20), groups=3, prefix=(16, 100),
                                        suffix=(1, 40), dup=0.5, arrivals="burst"),
                   block_size=16, max_num_seqs=64, budget=2048),
        # Block-aligned prompts, many exact duplicates: a full hit recomputes the last block.
        apc_stream("aligned_dups_bs16", S(1004, 40, block_size=16, output=(1, 16), groups=3, prefix=(16, 80),
                                          suffix=(0, 40), dup=0.4, aligned=1.0, arrivals="spread", span=40),
                   block_size=16, max_num_seqs=16, budget=256),
        apc_stream("aligned_prefix_of_bs4", S(1005, 40, block_size=4, output=(1, 12), groups=3, prefix=(8, 40),
                                              suffix=(0, 20), dup=0.25, prefix_of=0.25, aligned=0.7,
                                              arrivals="spread", span=40),
                   block_size=4, max_num_seqs=16, budget=128),
        # Tight KV: preemptions; resumed requests find their own (or shared) blocks if not evicted.
        apc_stream("tight_groups_bs16", S(1006, 40, block_size=16, output=(8, 64), groups=3, prefix=(32, 128),
                                          suffix=(8, 64), dup=0.1, arrivals="burst"),
                   block_size=16, kv_factor=2.0, max_num_seqs=32, budget=512),
        apc_stream("tight_groups_bs4", S(1007, 30, block_size=4, output=(4, 40), groups=3, prefix=(8, 40),
                                         suffix=(4, 24), dup=0.1, arrivals="spread", span=20),
                   block_size=4, kv_factor=1.5, max_num_seqs=16, budget=128),
        apc_stream("tight_bs32_bursts", S(1008, 36, block_size=32, output=(8, 48), groups=4, prefix=(32, 150),
                                          suffix=(8, 60), dup=0.15, arrivals="bursts", bursts=(0, 15, 30)),
                   block_size=32, kv_factor=2.0, max_num_seqs=24, budget=384),
        apc_stream("tight_minimal_kv", S(1009, 14, block_size=16, output=(10, 60), groups=2, prefix=(32, 64),
                                         suffix=(4, 40), dup=0.2, arrivals="burst"),
                   block_size=16, kv_factor=1.0, max_num_seqs=8, budget=128),
        # LRU eviction: more distinct prefixes than the pool holds, revisited in a cycle / at random.
        apc_stream("lru_cycle_bs16", cycling_requests(1010, 60, block_size=16, num_prefixes=7,
                                                      prefix_blocks=(2, 4), suffix=(1, 24), output=(1, 8),
                                                      order="cycle", span=120),
                   block_size=16, usable=24, max_num_seqs=8, budget=256),
        apc_stream("lru_random_bs4", cycling_requests(1011, 60, block_size=4, num_prefixes=12,
                                                      prefix_blocks=(4, 12), suffix=(1, 12), output=(1, 10),
                                                      order="random", span=100),
                   block_size=4, usable=40, max_num_seqs=8, budget=64),
        apc_stream("lru_sparse_idle", cycling_requests(1012, 24, block_size=16, num_prefixes=5,
                                                       prefix_blocks=(2, 4), suffix=(1, 20), output=(1, 6),
                                                       order="random", arrivals="sparse", span=12),
                   block_size=16, usable=14, max_num_seqs=4, budget=128),
        apc_stream("lru_zipf_tight", S(1013, 60, block_size=16, output=(2, 24), groups=12, prefix=(32, 96),
                                       suffix=(1, 40), zipf=1.2, arrivals="poisson", span=80),
                   block_size=16, usable=30, max_num_seqs=12, budget=256),
        # Chats: each turn extends the previous prompt with its output tokens.
        apc_stream("multiturn_bs16", multiturn_requests(1014, 8, 5, first=(20, 80), user=(4, 40),
                                                        output=(2, 30), gap=(3, 25), span=30, system=40),
                   block_size=16, max_num_seqs=16, budget=256),
        apc_stream("multiturn_tight_bs8", multiturn_requests(1015, 8, 4, first=(10, 60), user=(4, 30),
                                                             output=(4, 30), gap=(2, 15), span=20, system=24),
                   block_size=8, usable=60, max_num_seqs=12, budget=128),
        # long_prefill_token_threshold.
        apc_stream("lpt16_groups", S(1016, 36, block_size=16, output=(1, 24), groups=3, prefix=(32, 160),
                                     suffix=(1, 80), dup=0.15, arrivals="spread", span=40),
                   block_size=16, max_num_seqs=16, budget=128, lpt=16),
        apc_stream("lpt32_tight", S(1017, 30, block_size=16, output=(4, 40), groups=3, prefix=(32, 160),
                                    suffix=(8, 60), dup=0.1, arrivals="bursts", bursts=(0, 10, 25)),
                   block_size=16, kv_factor=2.0, max_num_seqs=16, budget=256, lpt=32),
        # Chunked prefill off.
        apc_stream("nochunk_groups", S(1018, 36, block_size=16, output=(1, 32), groups=3, prefix=(32, 128),
                                       suffix=(1, 60), dup=0.2, arrivals="spread", span=40),
                   block_size=16, max_num_seqs=16, budget=256, chunked=False, max_model_len=256),
        apc_stream("nochunk_tight", S(1019, 30, block_size=16, output=(4, 48), groups=3, prefix=(32, 120),
                                      suffix=(8, 60), dup=0.15, arrivals="burst", max_model_len=256),
                   block_size=16, kv_factor=2.0, max_num_seqs=16, budget=320, chunked=False, max_model_len=256),
        # scheduler_reserve_full_isl=False.
        apc_stream("noisl_tight", S(1020, 30, block_size=16, output=(4, 48), groups=3, prefix=(32, 140),
                                    suffix=(8, 60), dup=0.15, arrivals="burst"),
                   block_size=16, kv_factor=1.5, max_num_seqs=32, budget=64, reserve_full_isl=False),
        apc_stream("noisl_lpt16_bs8", S(1021, 36, block_size=8, output=(2, 40), groups=4, prefix=(16, 100),
                                        suffix=(4, 60), dup=0.1, aligned=0.3, arrivals="spread", span=50),
                   block_size=8, kv_factor=2.0, max_num_seqs=16, budget=48, lpt=16, reserve_full_isl=False),
        # Small budgets / few sequences.
        apc_stream("budget16_seqs4", S(1022, 20, block_size=16, output=(1, 16), groups=2, prefix=(16, 90),
                                       suffix=(1, 40), dup=0.2, arrivals="spread", span=40),
                   block_size=16, max_num_seqs=4, budget=16),
        apc_stream("budget32_tight_bs8", S(1023, 24, block_size=8, output=(2, 24), groups=3, prefix=(16, 100),
                                           suffix=(2, 40), dup=0.15, arrivals="burst"),
                   block_size=8, kv_factor=2.0, max_num_seqs=8, budget=32),
        apc_stream("seqs2_dups", S(1024, 20, block_size=16, output=(1, 16), groups=2, prefix=(16, 80),
                                   suffix=(1, 30), dup=0.4, arrivals="burst"),
                   block_size=16, max_num_seqs=2, budget=32),
        # max_model_len below prompt + output.
        apc_stream("mml_limit_tight", S(1025, 30, block_size=16, output=(1, 100), groups=3, prefix=(32, 100),
                                        suffix=(1, 40), dup=0.2, aligned=0.3, arrivals="burst",
                                        max_model_len=128),
                   block_size=16, kv_factor=2.0, max_num_seqs=16, budget=128, max_model_len=128),
        # Block size 1: any shared token prefix hits.
        apc_stream("bs1_prefix_of", S(1026, 16, block_size=1, output=(2, 16), groups=2, prefix=(4, 20),
                                      suffix=(1, 12), dup=0.2, prefix_of=0.3, arrivals="spread", span=20),
                   block_size=1, kv_factor=2.0, max_num_seqs=8, budget=64),
        # Everything at once.
        apc_stream("mixed_all", S(1027, 60, block_size=16, output=(1, 60), groups=5, prefix=(16, 160),
                                  subgroups=2, subprefix=(8, 40), suffix=(1, 80), dup=0.15, prefix_of=0.05,
                                  aligned=0.2, zipf=0.8, arrivals="poisson", span=60, max_model_len=256),
                   block_size=16, kv_factor=2.0, max_num_seqs=24, budget=96, lpt=40, max_model_len=256),
    ]


def async_streams() -> list[tuple[str, dict, list[dict]]]:
    S = shared_requests
    P = plain_stream
    A = lambda *a, **k: apc_stream(*a, async_scheduling=True, **k)  # noqa: E731
    return [
        # No prefix caching (crc32-pattern prompts, as in tests/golden/vllm).
        P("plain_loose_spread", 2101, n=30, prompt=(1, 200), output=(1, 32), max_num_seqs=16, budget=256,
          arrivals="spread", span=50),
        P("plain_loose_sparse_idle", 2102, n=10, prompt=(1, 64), output=(1, 16), max_num_seqs=8, budget=64,
          arrivals="sparse", span=30),
        P("plain_tight_burst", 2103, n=24, prompt=(16, 160), output=(8, 48), kv_factor=2.0, max_num_seqs=24,
          budget=512, arrivals="burst"),
        P("plain_tight_bs4", 2104, n=20, prompt=(4, 60), output=(4, 32), block_size=4, kv_factor=1.5,
          max_num_seqs=16, budget=128, arrivals="spread", span=15),
        P("plain_tight_minimal_kv", 2105, n=8, prompt=(10, 80), output=(10, 40), kv_factor=1.0, max_num_seqs=8,
          budget=128, arrivals="burst"),
        P("plain_budget16_seqs4", 2106, n=14, prompt=(5, 100), output=(1, 16), max_num_seqs=4, budget=16,
          arrivals="spread", span=30),
        P("plain_lpt32_tight", 2107, n=24, prompt=(16, 200), output=(4, 40), kv_factor=2.0, max_num_seqs=16,
          budget=256, lpt=32, arrivals="bursts", bursts=(0, 10, 25)),
        P("plain_nochunk_tight", 2108, n=24, prompt=(16, 180), output=(4, 40), max_model_len=256, chunked=False,
          kv_factor=2.0, max_num_seqs=16, budget=320, arrivals="burst"),
        P("plain_noisl_tight", 2109, n=24, prompt=(16, 200), output=(4, 40), kv_factor=1.5, max_num_seqs=24,
          budget=64, reserve_full_isl=False, arrivals="burst"),
        P("plain_mml_limit", 2110, n=24, prompt=(10, 127), output=(1, 100), max_model_len=128, kv_factor=2.0,
          max_num_seqs=16, budget=128, arrivals="burst"),
        P("plain_seqs1", 2111, n=8, prompt=(1, 50), output=(1, 12), max_num_seqs=1, budget=64, arrivals="burst"),
        P("plain_prefill_only", 2112, n=20, prompt=(1, 150), output=(1, 1), kv_factor=1.5, max_num_seqs=16,
          budget=96, arrivals="spread", span=10),
        # Prefix caching on.
        A("apc_groups_loose", S(2201, 36, block_size=16, output=(1, 24), groups=3, prefix=(20, 120),
                                suffix=(1, 50), dup=0.1, arrivals="spread", span=40),
          block_size=16, max_num_seqs=16, budget=256),
        A("apc_dups_burst", S(2202, 30, block_size=16, output=(1, 16), groups=3, prefix=(16, 80), suffix=(1, 40),
                              dup=0.5, aligned=0.5, arrivals="burst"),
          block_size=16, max_num_seqs=32, budget=1024),
        A("apc_tight_preempt_bs16", S(2203, 30, block_size=16, output=(8, 48), groups=3, prefix=(32, 120),
                                      suffix=(8, 50), dup=0.1, arrivals="burst"),
          block_size=16, kv_factor=2.0, max_num_seqs=24, budget=384),
        A("apc_tight_bs4", S(2204, 24, block_size=4, output=(4, 32), groups=3, prefix=(8, 40), suffix=(4, 20),
                             dup=0.1, aligned=0.3, arrivals="spread", span=15),
          block_size=4, kv_factor=1.5, max_num_seqs=16, budget=128),
        A("apc_lru_cycle", cycling_requests(2205, 40, block_size=16, num_prefixes=6, prefix_blocks=(2, 4),
                                            suffix=(1, 24), output=(1, 8), order="cycle", span=80),
          block_size=16, usable=22, max_num_seqs=8, budget=256),
        A("apc_multiturn_bs8", multiturn_requests(2206, 6, 4, first=(10, 60), user=(4, 30), output=(2, 24),
                                                  gap=(2, 15), span=20, system=24),
          block_size=8, usable=60, max_num_seqs=12, budget=128),
        A("apc_lpt16_bs32", S(2207, 30, block_size=32, output=(1, 24), groups=3, prefix=(32, 160), suffix=(1, 80),
                              dup=0.15, arrivals="spread", span=30),
          block_size=32, kv_factor=2.5, max_num_seqs=16, budget=128, lpt=16),
        A("apc_nochunk_tight", S(2208, 24, block_size=16, output=(4, 40), groups=3, prefix=(32, 120),
                                 suffix=(8, 60), dup=0.15, arrivals="burst", max_model_len=256),
          block_size=16, kv_factor=2.0, max_num_seqs=16, budget=320, chunked=False, max_model_len=256),
        A("apc_noisl_tight", S(2209, 24, block_size=16, output=(4, 40), groups=3, prefix=(32, 140), suffix=(8, 60),
                               dup=0.15, arrivals="burst"),
          block_size=16, kv_factor=1.5, max_num_seqs=24, budget=64, reserve_full_isl=False),
        A("apc_budget16_seqs4", S(2210, 16, block_size=16, output=(1, 16), groups=2, prefix=(16, 90),
                                  suffix=(1, 40), dup=0.2, arrivals="spread", span=30),
          block_size=16, max_num_seqs=4, budget=16),
        A("apc_mml_limit_tight", S(2211, 24, block_size=16, output=(1, 100), groups=3, prefix=(32, 100),
                                   suffix=(1, 40), dup=0.2, aligned=0.3, arrivals="burst", max_model_len=128),
          block_size=16, kv_factor=2.0, max_num_seqs=16, budget=128, max_model_len=128),
    ]


# ---------------------------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------------------------

def _spying_build_scheduler(build, hit_log: list):
    """Wrap the oracle's ``build_scheduler`` so every ``schedule()`` call logs vLLM's own hit counts."""

    def build_and_spy(**cfg):
        sched = build(**cfg)
        inner = sched.schedule

        def schedule(*args, **kwargs):
            so = inner(*args, **kwargs)
            hits = {nr.req_id: nr.num_computed_tokens for nr in so.scheduled_new_reqs}
            cached = so.scheduled_cached_reqs
            for rid, n in zip(cached.req_ids, cached.num_computed_tokens):
                if rid in cached.resumed_req_ids:
                    hits[rid] = n
            for rid, h in hits.items():  # the same number, read from the request after the schedule
                assert h == sched.requests[rid].num_computed_tokens - so.num_scheduled_tokens[rid], (rid, h)
            hit_log.append((dict(so.num_scheduled_tokens), hits))
            return so

        sched.schedule = schedule
        return sched

    return build_and_spy


def record(name: str, cfg: dict, reqs: list[dict], oracle, vllm_version: str) -> dict:
    oracle_cfg = vllm_oracle_config(cfg)
    oracle_reqs = []
    for r in reqs:
        spec = {k: r[k] for k in ("id", "arrival_step", "prompt_tokens", "output_tokens")}
        if "segments" in r:
            spec["prompt_token_ids"] = prompt_ids(r["segments"])
            assert len(spec["prompt_token_ids"]) == r["prompt_tokens"], (name, r["id"])
        oracle_reqs.append(spec)

    hit_log: list = []
    build = oracle.build_scheduler
    oracle.build_scheduler = _spying_build_scheduler(build, hit_log)
    try:
        buf = io.StringIO()
        summary = oracle.run(oracle_reqs, oracle_cfg, out=buf, max_idle_steps=50)
    finally:
        oracle.build_scheduler = build
    assert summary["initial_free_blocks"] == cfg["num_gpu_blocks"] - 1, name
    records = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert "summary" in records[-1]
    records = records[:-1]
    assert len(records) == len(hit_log), (name, len(records), len(hit_log))

    bs = cfg["block_size"]
    by_id = {r["id"]: r for r in reqs}
    steps = []
    hit_total: dict[str, int] = {}
    first_hit: dict[str, int] = {}
    for rec, (scheduled, hits) in zip(records, hit_log):
        assert rec["scheduled"] == scheduled, (name, rec["step"])
        assert set(hits) == set(rec["new"]) | set(rec["resumed"]), (name, rec["step"], hits, rec)
        for rid, h in hits.items():
            assert h % bs == 0 and 0 <= h, (name, rec["step"], rid, h)
            if not cfg["enable_prefix_caching"]:
                assert h == 0, (name, rid, h)
            hit_total[rid] = hit_total.get(rid, 0) + h
            first_hit.setdefault(rid, h)
        if not (rec["scheduled"] or rec["preempted"] or rec["finished"] or rec["emitted"]):
            continue
        steps.append({
            "step": rec["step"],
            "scheduled": rec["scheduled"],
            "preempted": sorted(rec["preempted"]),
            "finished": sorted(rec["finished"]),
            "emitted": rec["emitted"],
            "hits": hits,
        })
    per_req = {}
    for rid, s in summary["requests"].items():
        per_req[rid] = {k: s[k] for k in ("emitted_tokens", "num_preemptions", "finish_step")}
        per_req[rid]["hit_tokens"] = hit_total.get(rid, 0)
        per_req[rid]["first_hit"] = first_hit.get(rid, 0)
        r = by_id[rid]
        expect = min(r["output_tokens"], cfg["max_model_len"] - r["prompt_tokens"])
        assert s["finish_step"] is not None and s["emitted_tokens"] == expect, (name, r, s)
        assert s["num_preemptions"] == s["preempt_events_seen"], (name, rid, s)
    return {"name": name, "vllm_version": vllm_version, "config": cfg, "requests": reqs,
            "steps": steps, "summary": per_req}


def stats(golden: dict) -> dict:
    steps = golden["steps"]
    hits = [(rid, h) for s in steps for rid, h in s["hits"].items()]
    preempted_ids = set()
    resumed_hits = 0
    for s in steps:
        for rid, h in s["hits"].items():
            if rid in preempted_ids and h > 0:
                resumed_hits += 1
        preempted_ids.update(s["preempted"])
    return {
        "steps": len(steps),
        "preemptions": sum(v["num_preemptions"] for v in golden["summary"].values()),
        "admissions": len(hits),
        "hit_admissions": sum(1 for _, h in hits if h > 0),
        "hit_tokens": sum(h for _, h in hits),
        "resumed_hits": resumed_hits,
    }


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ORACLE_DIR))
    import vllm  # noqa: PLC0415
    import vllm_sched_oracle as oracle  # noqa: PLC0415  (needs the vLLM venv)

    sets = argv or ["apc", "async"]
    for which in sets:
        all_streams = {"apc": apc_streams, "async": async_streams}[which]()
        names = [s[0] for s in all_streams]
        assert len(names) == len(set(names))
        out_dir = OUT_DIRS[which]
        out_dir.mkdir(parents=True, exist_ok=True)
        tot = {"bytes": 0, "steps": 0, "preemptions": 0, "hit_admissions": 0, "hit_tokens": 0, "resumed_hits": 0}
        for name, cfg, reqs in all_streams:
            golden = record(name, cfg, reqs, oracle, vllm.__version__)
            text = dump(golden)
            (out_dir / f"{name}.json").write_text(text)
            st = stats(golden)
            st["bytes"] = len(text)
            for k in tot:
                tot[k] += st[k]
            print(f"{which:5s} {name:26s} reqs={len(reqs):3d} steps={st['steps']:4d} "
                  f"preempt={st['preemptions']:3d} admits={st['admissions']:3d} hit_admits={st['hit_admissions']:3d} "
                  f"hit_tokens={st['hit_tokens']:5d} resumed_hits={st['resumed_hits']:3d} bytes={st['bytes']}")
        print(f"{which}: {len(all_streams)} streams, " + ", ".join(f"{k}={v}" for k, v in tot.items())
              + f" -> {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1:])
