"""The waiting queue after a prefill round: exactly the requests the round did not take from
it, in their order, whatever it took (the queue's head, as rounds do, or any other subset)."""

from hypothesis import given
from hypothesis import strategies as st

from shared.loop.scheduler import _without_admitted


class _R:   # identity is all the queue filter looks at
    pass


@given(n=st.integers(0, 12), data=st.data())
def test_the_queue_keeps_exactly_what_was_not_admitted_in_order(n, data):
    queue = [_R() for _ in range(n)]
    if data.draw(st.booleans()):
        admitted = data.draw(st.permutations(queue))[:data.draw(st.integers(0, n))]
    else:
        admitted = queue[:data.draw(st.integers(0, n))]
    expected = [r for r in queue if not any(r is a for a in admitted)]
    assert _without_admitted(queue, admitted) == expected
