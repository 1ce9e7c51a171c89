"""The divergence monitor's rule on given loss sequences (no training): an exploding loss stops at once
past ln V, else when it persists PERSIST steps or lasts to the run's end; a lone excursion below ln V
marks its checkpoint as not good and training goes on; NaN stops at once."""

import math

from linscale_jax.train import divergence


def _feed(losses, start=0, finite=None):
    mon, reasons = divergence.Monitor(start, math.log(256)), {}
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
    assert not mon.good(20, None) and mon.good(21, None) and mon.at_end() is None
    mon, reasons = _feed(calm + [0.2, 0.3])  # the run ends inside an explosion: diverged at its end
    assert reasons == {} and "on the run's last steps (steps 21..22: 0.2, 0.3)" in mon.at_end()


def test_a_persisting_explosion_stops_on_its_third_step_one_past_ln_v_and_nan_at_once():
    mon, reasons = _feed([1.0] * 20 + [3.5, 4.0, 5.0, 1.0])  # below ln 256 = 5.55
    assert list(reasons) == [23] and "on 3 steps in a row (steps 21..23: 3.5, 4, 5)" in reasons[23]
    assert [s for s in range(23) if not mon.good(s, None)] == [20, 21, 22]
    _, reasons = _feed([2.0] * 20 + [1.2e7, 5.6])  # one step past ln V, then a dead model's ln V
    assert list(reasons) == [21] and "past ln V = 5.545" in reasons[21]
    _, reasons = _feed([2.0] * 5 + [math.nan])
    assert list(reasons) == [6] and reasons[6] == "loss is nan"
    _, reasons = _feed([2.0] * 5 + [2.1], finite=[True] * 5 + [False])
    assert list(reasons) == [6] and reasons[6].startswith("parameters became non-finite")
