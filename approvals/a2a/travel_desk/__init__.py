"""A demo remote agent, the "travel desk", on the A2A SDK's server side. It runs in a process
of its own (`python -m approvals.a2a.travel_desk`) and imports nothing from Django."""
