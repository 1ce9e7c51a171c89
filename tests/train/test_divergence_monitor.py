"""The divergence monitor's rule on given loss sequences (no training): an exploding loss stops only
when it persists PERSIST steps; a lone excursion marks its checkpoint as not good; NaN stops at once."""

import math

from linscale_jax.train import divergence


def _feed(losses, start=0, finite=None):
    mon, reasons = divergence.Monitor(start), {}
    for i, loss in enumerate(losses):
        step = start + i + 1
        r = mon.observe(step, loss, True if finite is None else finite[i])
        if r:
            reasons[step] = r
            break
    return mon, reasons


def test_lone_excursions_near_zero_loss_go_on_and_their_checkpoints_are_not_good():
    calm = [0.04, 0.03, 0.05, 0.04] * 5  # a converged task's batch losses
    mon, reasons = _feed(calm + [0.135, 0.04, 0.13, 0.15, 0.03] + calm)
    assert reasons == {}
    assert mon.healthy_after[20] is False and mon.healthy_after[22] is False and mon.healthy_after[23] is False
    assert mon.healthy_after[21] is True and mon.healthy_after[24] is True
    assert max(mon.recent) < 0.1  # the excursions never enter the running loss
    assert not mon.good(20, None) and mon.good(21, None)


def test_a_persisting_explosion_stops_on_its_third_step_and_nan_at_once():
    mon, reasons = _feed([2.0] * 20 + [7.0, 9.0, 30.0, 2.0])
    assert list(reasons) == [23] and "on 3 steps in a row (steps 21..23: 7, 9, 30)" in reasons[23]
    assert [s for s in range(23) if not mon.good(s, None)] == [20, 21, 22]
    _, reasons = _feed([2.0] * 5 + [math.nan])
    assert list(reasons) == [6] and reasons[6] == "loss is nan"
    _, reasons = _feed([2.0] * 5 + [2.1], finite=[True] * 5 + [False])
    assert list(reasons) == [6] and reasons[6].startswith("parameters became non-finite")
