"""The fleet controller's states and transitions (rtinfer.fleet.phase), without Ray."""

from rtinfer.fleet.phase import Event, Phase, advance, placing


def run(*events: Event, phase: Phase = Phase.STARTING) -> Phase:
    for e in events:
        phase = advance(phase, e)
    return phase


def test_the_first_placement_waits_for_the_hosts_and_does_not_balance():
    assert run(Event.CHANGED, Event.HOST_UP) is Phase.STARTING
    assert not placing(Phase.STARTING)
    assert run(Event.HOST_UP, Event.CHANGED, Event.READY) is Phase.PLACE
    assert run(Event.READY, Event.PLACED) is Phase.PLACED


def test_a_host_up_after_the_first_placement_balances_once():
    assert run(Event.HOST_UP, phase=Phase.PLACED) is Phase.BALANCE
    assert run(Event.CHANGED, Event.HOST_UP, phase=Phase.PLACED) is Phase.BALANCE
    assert run(Event.HOST_UP, Event.CHANGED, phase=Phase.PLACED) is Phase.BALANCE
    assert run(Event.HOST_UP, Event.PLACED, phase=Phase.PLACED) is Phase.PLACED


def test_a_host_lost_while_told_places_again_and_a_rebuilt_table_stands():
    assert run(Event.PLACED, Event.CHANGED, phase=Phase.PLACE) is Phase.PLACE
    assert placing(Phase.PLACE) and placing(Phase.BALANCE) and not placing(Phase.PLACED)
    assert run(Event.REBUILT) is Phase.PLACED
    assert run(Event.REBUILT, phase=Phase.PLACED) is Phase.PLACED


def test_a_balance_held_by_robots_moved_lately_is_tried_again_on_the_next_change():
    assert run(Event.HOST_UP, Event.HELD, phase=Phase.PLACED) is Phase.HELD
    assert not placing(Phase.HELD)
    assert run(Event.CHANGED, phase=Phase.HELD) is Phase.BALANCE
    assert run(Event.HOST_UP, phase=Phase.HELD) is Phase.BALANCE
    assert run(Event.CHANGED, Event.PLACED, phase=Phase.HELD) is Phase.PLACED
