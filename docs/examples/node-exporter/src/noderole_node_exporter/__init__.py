"""noderole plugin: a Prometheus node exporter on every node (the tutorial's example)."""
