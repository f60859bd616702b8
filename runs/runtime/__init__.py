"""The runtime: planners decide, tools act, and the run loop alone mints pauses, emits
events and drives parked runs back to life."""
