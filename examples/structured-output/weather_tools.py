"""The example's one tool: a slow weather lookup (a quarter of a second, as a real service
might take), so the two lookups of one response visibly run at once."""

import anyio

import hango

_WEATHER = {"paris": (21.5, "clear"), "oslo": (-3.0, "snow")}


@hango.tool
async def lookup(city: str) -> dict[str, object]:
    """Today's weather in ``city``: temperature in degrees Celsius and the sky."""
    await anyio.sleep(0.25)
    temp, sky = _WEATHER.get(city.lower(), (15.0, "cloudy"))
    return {"city": city, "temp_c": temp, "sky": sky}
