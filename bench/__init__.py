"""Harbor's benchmarks: `python -m bench` (bin/bench, bin/bench-live).

Not an installed app and not in the wheel: the benchmarks drive the product from outside,
through its public entry points (identity, services, `drain()` on the manual executor,
selectors), so they measure what a request gets, whatever the runtime looks like inside."""
