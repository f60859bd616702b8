"""The travel desk's HTTP face: its agent card at the well-known address and the A2A
JSON-RPC endpoint, as a Starlette app served by uvicorn. Its tasks are kept in a SQLite file
(the SDK's DatabaseTaskStore), so a restarted desk goes on with the tasks it had."""

import argparse
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import DatabaseTaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette

from .desk import TravelDesk

RPC_PATH = "/a2a/jsonrpc"


def agent_card(base_url: str, *, streaming: bool) -> AgentCard:
    return AgentCard(
        name="Travel desk",
        description="Books flights. Asks which date you want to fly, then books it.",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=streaming, push_notifications=False),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[
            AgentSkill(
                id="book_flight",
                name="Book a flight",
                description='Books a flight ("... needs auth", "... will fail", "... will be rejected", "... is slow").',
                tags=["travel"],
                examples=["Book a flight to Lisbon"],
            )
        ],
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=f"{base_url}{RPC_PATH}")
        ],
    )


def create_app(base_url: str, *, store: str, streaming: bool = True) -> Starlette:
    card = agent_card(base_url, streaming=streaming)
    engine = create_async_engine(f"sqlite+aiosqlite:///{store}")
    handler = DefaultRequestHandler(agent_executor=TravelDesk(), task_store=DatabaseTaskStore(engine), agent_card=card)
    routes = [
        *create_agent_card_routes(agent_card=card),
        *create_jsonrpc_routes(request_handler=handler, rpc_url=RPC_PATH),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()  # no task left running at shutdown
        await engine.dispose()

    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description="The demo travel desk, an A2A remote agent.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("HARBOR_TRAVEL_DESK_PORT", "8002")))
    parser.add_argument("--no-streaming", action="store_true", help="offer no streaming: callers poll")
    parser.add_argument(
        "--store",
        default=os.environ.get("HARBOR_TRAVEL_DESK_STORE")
        or os.path.join(os.environ.get("HARBOR_VAR_DIR", "var"), "travel-desk.sqlite3"),
        help="the SQLite file its tasks are kept in",
    )
    args = parser.parse_args()
    app = create_app(f"http://{args.host}:{args.port}", store=args.store, streaming=not args.no_streaming)
    uvicorn.run(app, host=args.host, port=args.port, log_level=os.environ.get("HARBOR_TRAVEL_DESK_LOG", "warning"))
