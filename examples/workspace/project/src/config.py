"""Settings of the uploader."""

# TODO: one retry is not enough on a flaky network (see docs/incidents.md).
RETRIES = 1
TIMEOUT_SECONDS = 30
