"""The four-stage two-batch overlap, by hand."""

import pytest

from sim.cost.kernel.two_batch_overlap import exposed_alltoall


def test_no_communication_leaves_nothing_exposed():
    """Without an all-to-all the stages are the compute alone."""
    assert exposed_alltoall(3.0, 5.0, 0.0, 0.15) == 0.0


def test_compute_longer_than_each_stages_communication_hides_it_all():
    """Attention side 4, experts 4, dispatch 1 and combine 2 (all-to-all 3), no SMs taken."""
    assert exposed_alltoall(4.0, 4.0, 3.0, 0.0) == pytest.approx(0.0)


def test_communication_longer_than_all_compute_is_paid_beyond_it():
    """Every stage waits for its communication: the stages sum to the all-to-all."""
    assert exposed_alltoall(0.5, 0.5, 30.0, 0.0) == pytest.approx(30.0 - 1.0)


def test_kernels_that_hold_sms_slow_the_compute_beside_them():
    """Compute-bound stages pay the all-to-all times the SM fraction it holds:
    (10 + 0.15) + (10 + 0.15) + (10 + 0.3) + (10 + 0.3) = 40.9, halved, minus 20."""
    assert exposed_alltoall(10.0, 10.0, 3.0, 0.15) == pytest.approx(0.45)


def test_one_stage_short_of_compute_exposes_its_excess():
    """Attention side 1 beside combine 2 (of 3): stage 4 takes 2; stages 1 + 1 + 2 + 2 (with
    experts 1 beside dispatch 1) = 6, halved = 3, minus compute 2 = 1."""
    assert exposed_alltoall(1.0, 1.0, 3.0, 0.0) == pytest.approx(1.0)
