"""Checks on a real Engine that several test modules share."""


def assert_idle_and_leak_free(engine) -> None:
    """Nothing waiting or running, every KV slot and request row free, no output tracker left."""
    sched = engine.scheduler
    assert sched.is_idle()
    sched.mem.check_idle()
    pool = sched.mem.req_to_token_pool
    assert pool.available_size() == pool.size
    assert not engine.trackers
