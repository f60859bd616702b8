"""The application layer: the use cases views, consumers, Celery tasks and management commands
call. It is the one place that drives both the domain and the runtime."""

from runs.application.start import run_start
from runs.application.steering import SteeringReceipt, steering_landed, steering_submit

__all__ = ["SteeringReceipt", "run_start", "steering_landed", "steering_submit"]
