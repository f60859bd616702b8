"""Pages of a queryset for the /v1 list routes (tasks.list, pause.list)."""

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.db.models import Model, QuerySet

from runs.kernel.errors import InvalidRequest

PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 200

Row = TypeVar("Row", bound=Model)


@dataclass(frozen=True)
class Page(Generic[Row]):
    rows: list[Row]
    page: int
    page_size: int
    page_count: int
    total_rows: int


def paginate(queryset: QuerySet[Row], *, page: int, page_size: int) -> Page[Row]:
    if page < 1:
        raise InvalidRequest("page starts at 1")
    if not 1 <= page_size <= PAGE_SIZE_MAX:
        raise InvalidRequest(f"page_size must be from 1 to {PAGE_SIZE_MAX}")
    total = queryset.count()
    rows = list(queryset[(page - 1) * page_size : page * page_size])
    return Page(rows, page, page_size, math.ceil(total / page_size), total)
