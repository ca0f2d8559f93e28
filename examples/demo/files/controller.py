"""Greenhouse controller loop (excerpt)."""

READ_INTERVAL_S = 30
STALE_AFTER_S = None  # TODO: 90, see docs/incidents.md


def step(zone, reading, vent, mister):
    if reading.temp > zone.max_temp and reading.previous_temp > zone.max_temp:
        vent.open()
        vent.check_end_switch()
    elif reading.temp < zone.min_temp:
        vent.close()
        vent.check_end_switch()
    if zone.has_mister and reading.humidity < zone.max_humidity - 10:
        mister.pulse(seconds=5)
