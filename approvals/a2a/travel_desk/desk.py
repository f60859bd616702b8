"""The travel desk's behaviour: one question, then a booking artifact. Words in the request
choose the other paths, so a person or a test can drive each one from the outside. It keeps
nothing of its own between messages: where a task stands is read from the task itself, as
the task store holds it, so a restarted desk goes on where it was."""

import asyncio
import os
import re
import secrets
from dataclasses import dataclass

import httpx
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Part, Role, Task, TaskState, TaskStatus

QUESTION = "Which date do you want to fly?"
AUTH_PROMPT = "Sign in to the travel desk: send your travel desk access code."
CALENDAR_PROMPT = "Sign in to your calendar, so the travel desk can see when you are free."
# An auth-required status may name the OAuth source whose access token it wants (its
# message metadata): a caller that knows the source can get the person's sign-in for it.
OAUTH_SOURCE_KEY = "oauth_source"
CALENDAR_SOURCE = "calendar"


@dataclass
class Booking:
    """Where one task stands: its request and the answer it waits for."""

    query: str
    phase: str  # auth or calendar (a sign-in), ask (the date), or done


def booking_of(task: Task) -> Booking:
    """The task's request (its first user message) and, from its status, what it waits for."""
    query = next(
        (part.text for message in task.history if message.role == Role.ROLE_USER for part in message.parts), ""
    )
    state, metadata = task.status.state, task.status.message.metadata
    if state == TaskState.TASK_STATE_AUTH_REQUIRED:
        return Booking(query, "calendar" if OAUTH_SOURCE_KEY in metadata else "auth")
    return Booking(query, "ask" if state == TaskState.TASK_STATE_INPUT_REQUIRED else "done")


def access_code() -> str:
    return os.environ.get("HARBOR_TRAVEL_DESK_ACCESS_CODE", "desk-code-42")


def slow_seconds() -> float:
    return float(os.environ.get("HARBOR_TRAVEL_DESK_SLOW_SECONDS", "3"))


def calendar_url() -> str:
    """The calendar API the desk checks an access token against (the demo provider's)."""
    return os.environ.get("HARBOR_TRAVEL_DESK_CALENDAR_URL", "http://127.0.0.1:8001").rstrip("/")


def destination(query: str) -> str:
    found = re.search(r"\bto\s+([A-Z][\w-]*)", query)
    return found.group(1) if found else "your destination"


class TravelDesk(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue=event_queue, task_id=task_id, context_id=context_id)
        text = context.get_user_input().strip()
        if context.current_task is None:
            if context.message is not None:
                # A new task is announced whole before any update about it (the SDK's rule).
                status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
                await event_queue.enqueue_event(
                    Task(id=task_id, context_id=context_id, status=status, history=[context.message])
                )
            await self._start(text, updater)
            return
        booking = booking_of(context.current_task)
        if booking.phase == "auth":
            await self._check_code(updater, text)
        elif booking.phase == "calendar":
            await self._check_calendar_token(updater, text)
        elif booking.phase == "ask":
            await self._book(booking, updater, text)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(
            event_queue=event_queue, task_id=context.task_id or "", context_id=context.context_id or ""
        )
        await updater.cancel(updater.new_agent_message([Part(text="Cancelled at the caller's request.")]))

    async def _start(self, query: str, updater: TaskUpdater) -> None:
        query = query.lower()
        if "will be rejected" in query:
            await updater.reject(updater.new_agent_message([Part(text="The travel desk does not book that trip.")]))
            return
        await updater.start_work(updater.new_agent_message([Part(text="Looking at flights...")]))
        if "is slow" in query:
            await asyncio.sleep(slow_seconds())
        if "will fail" in query:
            await updater.failed(updater.new_agent_message([Part(text="No seats left: the booking system is down.")]))
            return
        if "needs auth" in query:
            await updater.requires_auth(updater.new_agent_message([Part(text=AUTH_PROMPT)]))
            return
        if "needs my calendar" in query:
            await self._ask_for_calendar(updater, CALENDAR_PROMPT)
            return
        await self._ask(updater)

    async def _ask_for_calendar(self, updater: TaskUpdater, prompt: str) -> None:
        message = updater.new_agent_message([Part(text=prompt)], metadata={OAUTH_SOURCE_KEY: CALENDAR_SOURCE})
        await updater.requires_auth(message)

    async def _check_calendar_token(self, updater: TaskUpdater, token: str) -> None:
        """The answer is an access token: the calendar API must accept it."""
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                answer = await client.get(
                    f"{calendar_url()}/api/calendar/events", headers={"Authorization": f"Bearer {token}"}
                )
            accepted = answer.status_code == 200
        except httpx.HTTPError:  # the calendar is unreachable: the sign-in cannot be checked
            accepted = False
        if not accepted:
            await self._ask_for_calendar(updater, f"The calendar did not accept that sign-in. {CALENDAR_PROMPT}")
            return
        await self._ask(updater)

    async def _check_code(self, updater: TaskUpdater, code: str) -> None:
        if not secrets.compare_digest(code.encode(), access_code().encode()):
            await updater.requires_auth(
                updater.new_agent_message([Part(text=f"That code was not accepted. {AUTH_PROMPT}")])
            )
            return
        await self._ask(updater)

    async def _ask(self, updater: TaskUpdater) -> None:
        await updater.requires_input(updater.new_agent_message([Part(text=QUESTION)]))

    async def _book(self, booking: Booking, updater: TaskUpdater, date: str) -> None:
        if not date:
            await updater.requires_input(updater.new_agent_message([Part(text=QUESTION)]))
            return
        await updater.start_work(updater.new_agent_message([Part(text=f"Booking for {date}...")]))
        if "is slow" in booking.query.lower():
            await asyncio.sleep(slow_seconds())
        reference = f"TD-{secrets.token_hex(3).upper()}"
        summary = f"Booked a flight to {destination(booking.query)} on {date}. Reference {reference}."
        await updater.add_artifact([Part(text=summary)], name="booking", last_chunk=True)
        await updater.complete()
