"""Benchmarks: standalone scripts, each printing one JSON object on its last line;
`python -m bench` runs them all."""
