"""A rank's host or storage link queue (``offload.link.HostLink``): transfers one after another, and a link whose
device leaves mid-queue."""

from simmodel.offload.link import HostLink


def test_transfers_queue_and_a_cut_stops_the_one_under_way_and_drops_the_rest():
    # 1 GB/s and no latency: 1,000 bytes take 1,000 ns; three queued at 0 run 0–1,000, 1,000–2,000, 2,000–3,000.
    link = HostLink(1e9, 0)
    assert [link.transfer(0, 1000) for _ in range(3)] == [(0, 1000), (1000, 2000), (2000, 3000)]
    assert link.busy_until(10**6) == 3000
    link.cut(1500)  # the second stops half way, the third never runs
    assert link.free_at == 1500 and link.busy_until(10**6) == 1500 and link.busy_until(1200) == 1200
    assert link.transfer(2000, 1000) == (2000, 3000)  # (a later transfer starts when it is queued)
