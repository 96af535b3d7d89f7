"""PID against hand-derived responses (dt = 0.01 s unless said otherwise)."""

import numpy as np
import pytest

from controllers.pid import PID

DT = 0.01


def test_p_only_output_is_gain_times_error_per_axis():
    pid = PID([2.0, 3.0, 0.5], 0.0, 0.0, dt_s=DT)
    u = pid.update([1.0, 1.0, -2.0], [0.0, 0.5, 0.0])
    assert np.allclose(u, [2.0, 1.5, -1.0])


def test_integral_accumulates_ki_e_dt_each_step():
    pid = PID(0.0, 4.0, 0.0, dt_s=DT, n=1, kt=0.0)
    for n in range(1, 6):
        u = pid.update(0.5, 0.0)
        assert u[0] == pytest.approx(n * 4.0 * 0.5 * DT)


def test_setpoint_step_gives_no_derivative_kick():
    pid = PID(0.0, 0.0, 10.0, dt_s=DT, n=1)
    pid.update(0.0, 0.0)
    assert pid.update(1.0, 0.0)[0] == 0.0  # measurement did not move
    # a measurement move of 0.01 in one step is a rate of 1: D = -kd * 1
    assert pid.update(1.0, 0.01)[0] == pytest.approx(-10.0)


def test_derivative_low_pass_has_the_configured_time_constant():
    tau = 0.03
    pid = PID(0.0, 0.0, 1.0, dt_s=DT, n=1, tau_d_s=tau)
    pid.update(0.0, 0.0, measurement_rate=0.0)
    alpha = DT / (tau + DT)
    for n in range(1, 5):
        u = pid.update(0.0, 0.0, measurement_rate=1.0)
        assert u[0] == pytest.approx(-(1 - (1 - alpha) ** n))


def test_rate_setpoint_and_feedforward_enter_the_output():
    pid = PID(0.0, 0.0, 2.0, dt_s=DT, n=1)
    u = pid.update(0.0, 0.0, rate_setpoint=0.5, measurement_rate=0.2, feedforward=9.81)
    assert u[0] == pytest.approx(2.0 * 0.3 + 9.81)


def test_output_is_clipped_to_limits():
    pid = PID(100.0, 0.0, 0.0, dt_s=DT, out_min=[-1, -2, -3], out_max=[1, 2, 3])
    assert np.allclose(pid.update([1, 1, -1], [0, 0, 0]), [1, 2, -3])


def test_integral_is_clamped_by_its_limits():
    pid = PID(0.0, 10.0, 0.0, dt_s=DT, n=1, kt=0.0, i_min=-0.3, i_max=0.3)
    for _ in range(100):
        u = pid.update(1.0, 0.0)
    assert u[0] == pytest.approx(0.3) and pid.i[0] == pytest.approx(0.3)
    # and it comes off the clamp at once when the error reverses (no stored windup)
    u = pid.update(-1.0, 0.0)
    assert u[0] == pytest.approx(0.3 - 10.0 * DT)


def test_back_calculation_converges_to_the_textbook_fixed_point():
    # In steady saturation with constant e, u_raw settles at u_max + ki * e / kt.
    kp, ki, kt, e, umax = 1.0, 5.0, 20.0, 2.0, 1.5
    pid = PID(kp, ki, 0.0, dt_s=DT, n=1, kt=kt, out_min=-umax, out_max=umax, i_min=-1e9, i_max=1e9)
    for _ in range(2000):
        pid.update(e, 0.0)
    assert pid.u[0] == umax
    assert pid.u_raw[0] == pytest.approx(umax + ki * e / kt, rel=1e-6)
    # without back-calculation the integral would have run away to ~ki*e*20 s = 200
    assert pid.i[0] == pytest.approx(umax + ki * e / kt - kp * e - ki * e * DT, rel=1e-6)


def test_bumpless_gain_change_keeps_the_output_continuous():
    pid = PID(2.0, 1.0, 0.5, dt_s=DT, n=1)
    for k in range(50):
        pid.update(1.0, 0.01 * k, measurement_rate=1.0)
    u_before = pid.u[0]
    pid.set_gains(kp=8.0, ki=3.0, kd=1.5)
    u_after = pid.update(1.0, 0.49, measurement_rate=1.0)[0]
    # same error and rate as the last update: only the new integral increment may differ
    e = 1.0 - 0.49
    assert u_after == pytest.approx(u_before + 3.0 * e * DT, abs=1e-9)
    # without the integral rescale the kp jump alone would move it by 6 * e = 3
    assert abs(u_after - u_before) < 0.1


def test_reset_clears_integral_and_filter():
    pid = PID(0.0, 5.0, 1.0, dt_s=DT, n=1, kt=0.0)
    for _ in range(10):
        pid.update(1.0, 0.0, measurement_rate=0.3)
    pid.reset()
    assert pid.i[0] == 0.0 and pid.rate[0] == 0.0
    assert pid.update(0.0, 0.0)[0] == 0.0


def test_a_gain_change_whose_integral_would_pass_its_limits_moves_the_output_by_the_excess():
    pid = PID(2.0, 1.0, 0.0, dt_s=DT, n=1, i_min=-0.5, i_max=0.5)
    for _ in range(20):
        pid.update(1.05, 0.0)
    u_before, e = pid.u[0], pid.e[0]
    pid.set_gains(kp=8.0)  # keeping u would need i = u - 8 e, far below i_min = -0.5
    assert pid.i[0] == -0.5
    u_after = pid.update(1.05, 0.0)[0]
    excess = (8.0 * e - 0.5) - u_before  # the new kp * e + clipped integral, over the old u
    assert u_after == pytest.approx(u_before + excess + DT * 1.0 * e, abs=1e-9)


def test_a_defaulted_kt_follows_kp_and_ki_and_kt_can_be_set():
    pid = PID(2.0, 1.0, 0.0, dt_s=DT, n=2)
    assert pid.gains.kt.tolist() == [0.5, 0.5]
    pid.set_gains(kp=4.0, ki=8.0)
    assert pid.gains.kt.tolist() == [2.0, 2.0]  # ki / kp again, not the old 0.5
    pid.set_gains(kt=[3.0, 0.0])
    assert pid.gains.kt.tolist() == [3.0, 0.0]
    pid.set_gains(kp=1.0)
    assert pid.gains.kt.tolist() == [3.0, 0.0]  # given explicitly: kept


@pytest.mark.parametrize(
    "make, says",
    [
        (
            lambda: PID(0.0, 5.0, 0.0, dt_s=DT, n=1),
            "kp = 0 <= 0 with ki = 5 would mean no anti-windup",
        ),
        (lambda: PID([1.0, -1.0], 2.0, 0.0, dt_s=DT, n=2), "axis 1: kt defaults to ki / kp"),
        (
            lambda: PID(1.0, 1.0, 0.0, dt_s=DT, n=1, kt=1 / DT),
            "kt \\* dt = 1; it must be in \\[0, 1\\)",
        ),
        (lambda: PID(1.0, 2000.0, 0.0, dt_s=DT, n=1), "kt = 2000/s"),
    ],
)
def test_gains_the_loop_cannot_run_with_are_refused_with_the_fix(make, says):
    with pytest.raises(ValueError, match=says):
        make()


def test_a_refused_gain_change_changes_nothing():
    pid = PID(2.0, 1.0, 0.0, dt_s=DT, n=1)
    with pytest.raises(ValueError, match="kt \\* dt"):
        pid.set_gains(ki=5000.0)
    assert (pid.gains.kp[0], pid.gains.ki[0], pid.gains.kt[0]) == (2.0, 1.0, 0.5)
