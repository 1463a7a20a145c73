"""What the sidecar tells: its own metrics, the notifier (log line, Event, counter in one call),
structured logs and the HTTP endpoints."""
