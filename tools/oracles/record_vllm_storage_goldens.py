#!/usr/bin/env python3
"""Record golden traces from vLLM 0.32.0's real v1 scheduler with its KV offloading connector in tiering mode
(``TieringOffloadingSpec``: a CPU primary tier plus one secondary tier of type ``example``).

Regenerate (from the repo root, /work/main), in the venv of ``record_vllm_offload_goldens.py`` (vllm==0.32.0, CPU
torch, e.g. ``/tmp/oracle-vllm``):

    /tmp/oracle-vllm/bin/python tools/oracles/record_vllm_storage_goldens.py            # all streams (~10 s)
    /tmp/oracle-vllm/bin/python tools/oracles/record_vllm_storage_goldens.py --only NAME # some
    /tmp/oracle-vllm/bin/python tools/oracles/record_vllm_storage_goldens.py --check    # compare, write nothing

Writes ``tests/golden/vllm_storage/<name>.json`` (all together under 600 KB, asserted); fixed seeds,
byte-identical on rerun. The script runs itself under ``PYTHONHASHSEED=0`` (requests finishing in one step are
refreshed in the order vLLM walks a set of ids; see ``record_vllm_offload_goldens.py``), and every stream below
records the same under seeds 0-8 (``PYTHONHASHSEED=n ... --check``; the seed of ``sync_random_bs8`` was chosen
for that).

Everything but the connector's configuration is ``record_vllm_offload_goldens.py``'s, imported, not copied: the
same scheduler (``build_scheduler``: one full-attention layer, one 4096-byte page per GPU block, prefix caching on),
the same engine loop and fake worker (``run``: sync ``S0 U0 S1 U1 ...``, async batch queue of two; a GPU<->CPU
store or load job of step k starts when step k's pass ends, or at ``Sk`` for a load made by an empty step, and is
reported done in the first output processed after it starts, or in its own step's output if flushed), the same
generated and hand-made streams, and the same golden format and summary (``record``). Read that docstring first.

The vLLM configuration (no ``CacheConfig.kv_offloading_size``; the transfer config is given whole)::

    KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config={
        "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": host_blocks * 4096,
        "block_size": <GPU block size>, "secondary_tiers": [{"type": "example"}]})

``OffloadingSpecFactory`` maps ``spec_name`` to ``vllm.v1.kv_offload.tiering.spec.TieringOffloadingSpec`` (a
``CPUOffloadingSpec``: ``cpu_bytes_to_use`` // page-aligned chunk bytes = ``host_blocks`` chunks, asserted);
``block_size`` = the GPU block size gives one GPU block per chunk; ``offload_prompt_only`` and the LRU policy are
the defaults, as in the CPU-only goldens. Its ``get_manager`` builds a scheduler-side ``SharedOffloadRegion``
(an mmap of ``/dev/shm/vllm_offload_<engine_id>.mmap``, engine_id a uuid; plain CPU code, nothing needs a GPU;
the script shuts the manager down after each stream, which unlinks the file), a
``CPUPrimaryTierOffloadingManager`` over it, ``ExampleSecondaryTierManager`` (``tiering/example/manager.py``: a
dict of keys, no capacity, every job completed inside its ``submit_*`` call) and the ``TieringOffloadingManager``.
No worker side is built (the fake worker only reports job ids), so nothing here needs a GPU and vLLM is not
patched. The harness only wraps methods of the built instances to observe them (``Tap``): the manager's
``_initiate_promotion``, the tier's ``submit_store`` / ``submit_load`` and the scheduler's ``update_from_output``;
each wrapper calls the original and changes nothing.

What the tiering manager does (``tiering/manager.py``, all in the scheduler process; read there, and the cascade
rule checked on all 163 cascade jobs of the streams below):
* Cascade. When a GPU->CPU store job is reported done (``update_from_output`` -> ``complete_store``), the
  manager pins its chunks (``prepare_read``, ref_cnt + 1) and calls the example tier's ``submit_store``, which
  records the keys at once (so they are in the secondary tier from that ``U`` on) and queues a finished result.
  Every stored chunk is cascaded, also keys the tier already holds. The pin is dropped when the manager next
  polls its tiers (``_maybe_process_finished_jobs``), at most once per "gate" period: the gate reopens at the
  end of ``on_schedule_end`` (inside ``build_connector_meta`` of each ``schedule()``), and the first later
  ``lookup`` / ``prepare_store`` / ``on_schedule_end`` polls. Within one ``schedule()`` the order is: lookups of
  waiting requests, ``on_schedule_end`` (flushes promotions), then the step's GPU->CPU ``prepare_store`` calls.
  So a cascade submitted in ``Uk`` is unpinned in the first ``schedule()`` after ``Uk`` (sync ``S(k+1)``, async
  ``S(k+2)``), at its first manager call, if the ``schedule()`` before that one made no ``prepare_store`` call;
  otherwise the gate stays closed through that ``schedule()``'s lookups and its ``on_schedule_end``, and the
  pin goes at its first ``prepare_store`` or, if it makes none, in the ``schedule()`` after it. The pin is thus
  never seen by a GPU->CPU store (the first ``prepare_store`` of a step always polls), only by promotions
  started in the lookups of the next ``schedule()``.
* Promotion. A lookup that misses the CPU tier and hits the example tier calls ``_initiate_promotion``: a CPU
  slot is taken at once (``prepare_write`` = the CPU tier's ``prepare_store`` for that one key, which may evict
  any other ready, unpinned chunk, the same request's host hits found a moment earlier included) and the lookup
  returns HIT_PENDING: the connector defers the request (it is skipped in that ``schedule()``, not blocking the
  queue; the remaining keys are still looked up, so they are promoted in the same step). If no slot can be had
  (everything else write-pending or pinned), the lookup returns MISS and the prefix stops there. The promotions
  of step k are submitted as one job per request in ``Sk``'s ``on_schedule_end``; the example tier completes it
  at once, and the result is polled by ``Sk``'s first ``prepare_store`` if any, else at ``S(k+1)``'s first
  lookup. So a promotion started at ``Sk`` is a HIT at ``S(k+1)``, and the request's host->GPU load job is
  created at ``S(k+1)`` (if the step-(k+1) lookups do not evict or re-promote part of it), then admitted as in
  the CPU-only goldens (sync: ``S(k+2)`` after an empty step ``k+1``, ``S(k+3)`` after a pass). A chunk promoted
  at ``Sk`` is ready and evictable (LRU: inserted at promotion) from that poll on, so ``Sk``'s own stores may
  evict it again. vLLM's tiers never answer RETRY here (the example tier answers HIT or MISS).
* A request whose prefix beyond the GPU hit has more example-only chunks than the CPU tier can hold at once is
  never admitted: each step its promotions evict its own chunks promoted the step before (livelock, vLLM 0.32.0
  behaviour; seen with 4 such chunks and a 2-chunk CPU tier, nothing else running: the same two steps repeat
  until ``run``'s 200-empty-step guard; the streams avoid it). A prompt offer larger than the free + evictable
  CPU slots is dropped whole ("cannot store chunks"), as in the CPU-only connector, so such a prefix reaches the
  example tier only through chunked prefill.
* The engine takes empty steps while a cascade or promotion job is not yet polled (``has_pending_work``), as
  it does while a GPU<->CPU job is in flight.

Golden format: ``record_vllm_offload_goldens.py``'s, with ``config.secondary_tiers`` ([{"type": "example"}]),
and in each step record two more fields:
    promotions {id: chunks the tiering manager promoted from the example tier for that request during that
                step's schedule() (successful _initiate_promotion calls)},
    cascades   (chunks submitted to the example tier while the step's output was processed, Uk: the chunks of
                the GPU->CPU store jobs reported done there),
and in the summary ``storage_hit``: of the request's first-admission load (the one ``host_hit`` counts), the
tokens whose keys were promoted for that same request (vLLM's ``_request_load_sources``, the source it reports
per key, and the harness's own count of promotions agree; both tiers report ``CacheHitSource.HOST`` since the
example tier's medium is CPU, so ``get_load_source`` itself cannot tell them apart). A key promoted by another
request counts as a host hit. Records are dropped when every field but ``step`` and ``hits`` is empty, so a
step with only a promotion or a cascade is kept; to compare the CPU-only fields only, drop the records that are
empty in those (``tests/unit/test_vllm_offload_golden._nonempty``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record_vllm_offload_goldens as offload  # noqa: E402
from record_vllm_goldens_apc import cycling_requests, multiturn_requests, shared_requests  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "vllm_storage"
SECONDARY_TIERS = [{"type": "example"}]
MAX_TOTAL_BYTES = 600_000


def kv_transfer_config(cfg: dict):
    from vllm.config import KVTransferConfig  # noqa: PLC0415

    return KVTransferConfig(
        kv_connector="OffloadingConnector", kv_role="kv_both",
        kv_connector_extra_config={"spec_name": "TieringOffloadingSpec",
                                   "cpu_bytes_to_use": cfg["host_blocks"] * offload.PAGE_BYTES,
                                   "block_size": cfg["block_size"],
                                   "secondary_tiers": [dict(t) for t in cfg["secondary_tiers"]]})


class Tap:
    """Builds the scheduler (``build``, for ``offload.run``) and watches its tiering manager: promotions (inside
    ``schedule()``), cascades (inside ``update_from_output``), and for each load job how many of its keys were
    promoted for the loading request (``hook``). ``log`` lists the events in order, with their phase."""

    def __init__(self) -> None:
        self.phase: tuple[str, int] | None = None  # ("S", k) inside schedule() k, ("U", k) inside its output
        self.step_of: dict[int, int] = {}  # id(scheduler output) -> step
        self.promotions: dict[int, dict[str, int]] = {}
        self.promotion_misses: dict[int, dict[str, int]] = {}
        self.cascades: dict[int, int] = {}
        self.storage_loads: dict[int, dict[str, int]] = {}  # step -> {id: load keys promoted for id}
        self.promoted: dict[str, set] = {}
        self.log: list[tuple] = []
        self.mgr = None

    def build(self, cfg: dict):
        from vllm.v1.kv_offload.tiering.example.manager import ExampleSecondaryTierManager  # noqa: PLC0415
        from vllm.v1.kv_offload.tiering.manager import TieringOffloadingManager  # noqa: PLC0415

        sched = offload.build_scheduler(cfg, kv_transfer_config=kv_transfer_config(cfg))
        mgr = sched.connector.connector_scheduler.manager
        assert type(mgr) is TieringOffloadingManager, type(mgr)
        assert [type(t) for t in mgr.secondary_tiers] == [ExampleSecondaryTierManager], mgr.secondary_tiers
        tier = mgr.secondary_tiers[0]
        self.mgr = mgr

        def in_phase(kind: str) -> int:
            assert self.phase is not None and self.phase[0] == kind, (kind, self.phase)
            return self.phase[1]

        initiate, submit_store, submit_load = mgr._initiate_promotion, tier.submit_store, tier.submit_load
        update = sched.update_from_output

        def _initiate_promotion(tier_idx, key, req_context):
            ok = initiate(tier_idx, key, req_context)
            step, rid = in_phase("S"), req_context.req_id
            per_step = (self.promotions if ok else self.promotion_misses).setdefault(step, {})
            per_step[rid] = per_step.get(rid, 0) + 1
            if ok:
                self.promoted.setdefault(rid, set()).add(key)
            self.log.append((self.phase, "promote" if ok else "promote-miss", rid))
            return ok

        def _submit_store(job):
            step = in_phase("U")
            self.cascades[step] = self.cascades.get(step, 0) + len(job.keys)
            self.log.append((self.phase, "cascade", job.req_context.req_id, len(job.keys)))
            return submit_store(job)

        def _submit_load(job):
            in_phase("S")
            self.log.append((self.phase, "promotion-job", job.req_context.req_id, len(job.keys)))
            return submit_load(job)

        def _update_from_output(so, mro):
            self.phase = ("U", self.step_of.pop(id(so)))
            try:
                return update(so, mro)
            finally:
                self.phase = None

        mgr._initiate_promotion = _initiate_promotion
        tier.submit_store = _submit_store
        tier.submit_load = _submit_load
        sched.update_from_output = _update_from_output
        return sched

    def hook(self, step: int, sched, so) -> None:
        if so is None:
            self.phase = ("S", step)
            return
        self.phase = None
        self.step_of[id(so)] = step
        jobs = sched.connector.connector_scheduler._jobs
        for jid, job in so.kv_connector_metadata.load_jobs.items():
            keys = jobs[jid].keys
            sources = self.mgr._request_load_sources.get(job.req_id, {})
            n = sum(1 for k in keys if k in sources)
            assert n == len(keys & self.promoted.get(job.req_id, set())), job.req_id
            self.storage_loads.setdefault(step, {})[job.req_id] = n
            self.log.append((("S", step), "load", job.req_id, len(keys), n))

    def close(self) -> None:
        if self.mgr is not None:
            self.mgr.shutdown()  # (closes and unlinks the /dev/shm region)
            self.mgr = None


def run(cfg: dict, reqs: list[dict], tap: Tap) -> tuple[list[dict], dict]:
    """``offload.run`` with the tiering connector; each record gains ``promotions`` and ``cascades``."""
    try:
        records, outcome = offload.run(cfg, reqs, hook=tap.hook, build=tap.build)
    finally:
        tap.close()
    for rec in records:
        rec["promotions"] = tap.promotions.get(rec["step"], {})
        rec["cascades"] = tap.cascades.get(rec["step"], 0)
    return records, outcome


def record(name: str, cfg: dict, reqs: list[dict], vllm_version: str, tap: Tap | None = None) -> dict:
    """``offload.record`` with the tiering connector, plus ``storage_hit``; ``tap`` (a fresh ``Tap``), if given,
    keeps what was observed (its ``log``: a debugging aid)."""
    tap = tap or Tap()
    golden = offload.record(name, cfg, reqs, vllm_version, run_fn=lambda c, r: run(c, r, tap))
    storage_hit: dict[str, int] = {}
    for rec in golden["steps"]:  # (the same first-admission rule as host_hit)
        for rid in rec["loads"]:
            storage_hit.setdefault(rid, tap.storage_loads[rec["step"]][rid] * cfg["block_size"])
        for rid in rec["hits"]:
            storage_hit.setdefault(rid, 0)
    for rid, s in golden["summary"].items():
        s["storage_hit"] = storage_hit.get(rid, 0)
        assert s["storage_hit"] <= s["host_hit"], (name, rid)
    return golden


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------

def stream(name: str, reqs: list[dict], **kw) -> tuple[str, dict, list[dict]]:
    """``offload.stream`` (``usable`` GPU blocks, a CPU tier of ``host_blocks``) plus the example tier."""
    name, cfg, reqs = offload.stream(name, reqs, **kw)
    cfg["secondary_tiers"] = [dict(t) for t in SECONDARY_TIERS]
    return name, cfg, reqs


def streams() -> list[tuple[str, dict, list[dict]]]:
    C, M, S, H = cycling_requests, multiturn_requests, shared_requests, offload.handmade
    # Hand-made: f and g are 80-token fillers (5 blocks: they empty the 5-block GPU cache, and their 5-chunk
    # offers never fit the CPU tier, so they leave it alone).
    return [
        # A's 4 chunks go to the CPU tier and on to the example tier; Y's store evicts A's tail (A3, A2: a finished
        # request is refreshed head last); Z loads A0-A1 from the CPU tier, refreshing them. C then finds A0-A1
        # on the host and A2-A3 only in storage: their promotions (S13, evicting Y's chunks) are HIT at S14, which
        # creates C's 4-block load; storage_hit 32 of host_hit 64.
        stream("min_split_sync", H(5101, [("a", 0, [("a", 64), ("a1", 1)], 1), ("y", 2, [("y", 32), ("y1", 1)], 1),
                                         ("f", 4, [("f", 80)], 1), ("z", 6, [("a", 32), ("z1", 1)], 1),
                                         ("g", 10, [("g", 80)], 1), ("c", 13, [("a", 64), ("c1", 1)], 1)]),
               block_size=16, usable=5, host_blocks=4, async_scheduling=False),
        # The same without Z: A0-A1 are the least recent chunks, so C's promotions of A2-A3 (S7) evict C's own
        # host hits A1, A0; at S8 those are promoted back (evicting Y's), at S9 the load takes all 4 (all promoted
        # for C: storage_hit 64).
        stream("min_promote_evicts_own_hits_sync",
               H(5102, [("a", 0, [("a", 64), ("a1", 1)], 1), ("y", 2, [("y", 32), ("y1", 1)], 1),
                        ("f", 4, [("f", 80)], 1), ("c", 7, [("a", 64), ("c1", 1)], 1)]),
               block_size=16, usable=5, host_blocks=4, async_scheduling=False),
        # X's store (taken at S4, written until U5) fills the 2-chunk CPU tier when C looks up A's prefix at S5:
        # the example tier has it, but the promotion gets no slot, so the lookup is a MISS and C computes all 33
        # tokens; C re-stores A0-A1 (S6), cascaded again (U7).
        stream("min_promote_no_slot_sync", H(5103, [("a", 0, [("a", 32), ("a1", 1)], 1), ("f", 2, [("f", 80)], 1),
                                                   ("x", 4, [("x", 32), ("x1", 1)], 1),
                                                   ("c", 5, [("a", 32), ("c1", 1)], 1)]),
               block_size=16, usable=5, host_blocks=2, async_scheduling=False),
        # Async: A stored and cascaded, B's store evicts it from the CPU tier; C's promotions at S10, its load created
        # at S11 (an empty step), C admitted at S12.
        stream("min_promote_load_async", H(5104, [("a", 0, [("a", 32), ("a1", 1)], 1),
                                                 ("b", 3, [("b", 32), ("b1", 1)], 1), ("f", 6, [("f", 80)], 1),
                                                 ("c", 10, [("a", 32), ("c1", 1)], 1)]),
               block_size=16, usable=5, host_blocks=2, async_scheduling=True),
        # Cycling prefixes (2-4 blocks, more than the CPU tier's 8 chunks in all) through a tight GPU cache.
        stream("sync_cycle_bs16", C(5001, 36, block_size=16, num_prefixes=6, prefix_blocks=(2, 4), suffix=(1, 20),
                                   output=(1, 6), order="cycle", span=110),
               block_size=16, usable=10, host_blocks=8, async_scheduling=False, max_num_seqs=8, budget=256),
        stream("async_cycle_bs16", C(5002, 36, block_size=16, num_prefixes=6, prefix_blocks=(2, 4), suffix=(1, 20),
                                    output=(1, 6), order="cycle", span=110),
               block_size=16, usable=10, host_blocks=8, async_scheduling=True, max_num_seqs=8, budget=256),
        stream("sync_random_bs8", C(5004, 40, block_size=8, num_prefixes=7, prefix_blocks=(3, 7), suffix=(1, 12),
                                   output=(1, 6), order="random", span=120),
               block_size=8, usable=16, host_blocks=12, async_scheduling=False, max_num_seqs=8, budget=128),
        stream("async_random_sparse_bs8", C(5003, 30, block_size=8, num_prefixes=5, prefix_blocks=(3, 8),
                                           suffix=(1, 8), output=(1, 4), order="random", arrivals="sparse", span=8),
               block_size=8, usable=12, host_blocks=12, async_scheduling=True, max_num_seqs=8, budget=128),
        # Multi-turn chats: each turn re-reads its conversation's growing prefix.
        stream("sync_multiturn_bs16", M(5005, 5, 4, first=(16, 40), user=(4, 20), output=(2, 12), gap=(4, 16),
                                       span=20, system=16),
               block_size=16, usable=14, host_blocks=16, async_scheduling=False, max_num_seqs=8, budget=256),
        stream("async_multiturn_bs8", M(5006, 5, 4, first=(8, 30), user=(4, 16), output=(2, 10), gap=(3, 12),
                                       span=20, system=16),
               block_size=8, usable=24, host_blocks=16, async_scheduling=True, max_num_seqs=8, budget=128),
        # Bursts of shared system prompts and duplicates.
        stream("sync_shared_bursts_bs16", S(5007, 24, block_size=16, output=(1, 8), groups=4, prefix=(16, 48),
                                           suffix=(1, 24), dup=0.25, arrivals="bursts", bursts=(0, 20, 40, 60)),
               block_size=16, usable=10, host_blocks=6, async_scheduling=False, max_num_seqs=8, budget=256),
        # Chunked prefills (budget 32): long prompts stored a chunk or two per step.
        stream("sync_chunked_bs16", C(5008, 24, block_size=16, num_prefixes=4, prefix_blocks=(3, 6), suffix=(8, 30),
                                     output=(1, 6), order="cycle", span=80),
               block_size=16, usable=16, host_blocks=10, async_scheduling=False, max_num_seqs=8, budget=32),
    ]


def stats(golden: dict) -> str:
    steps, summ = golden["steps"], golden["summary"]
    return (f"steps={len(steps):4d} preempt={sum(len(s['preempted']) for s in steps):3d} "
            f"loads={sum(len(s['loads']) for s in steps):3d} stores={sum(len(s['stores']) for s in steps):3d} "
            f"promoted={sum(sum(s['promotions'].values()) for s in steps):3d} "
            f"cascaded={sum(s['cascades'] for s in steps):4d} "
            f"host_hit_reqs={sum(1 for v in summ.values() if v['host_hit']):2d} "
            f"storage_hit_reqs={sum(1 for v in summ.values() if v['storage_hit']):2d}")


def main(argv=None) -> int:
    stale = offload.record_streams(__doc__, argv, streams(), record, stats, OUT_DIR)
    total = sum(p.stat().st_size for p in OUT_DIR.glob("*.json"))
    assert total < MAX_TOTAL_BYTES, f"storage goldens take {total} bytes"
    return stale


if __name__ == "__main__":
    if "PYTHONHASHSEED" not in os.environ:  # vLLM walks sets of request ids (see record_vllm_offload_goldens.py)
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
