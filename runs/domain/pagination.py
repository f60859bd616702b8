"""Pages of a queryset for the /v1 list routes (tasks.list, pause.list)."""

import math

from django.db.models import QuerySet

from runs.domain.errors import InvalidRequest

PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 200


def paginate(queryset: QuerySet, *, page: int, page_size: int) -> tuple[list, dict]:
    if page < 1:
        raise InvalidRequest("page starts at 1")
    if not 1 <= page_size <= PAGE_SIZE_MAX:
        raise InvalidRequest(f"page_size must be from 1 to {PAGE_SIZE_MAX}")
    total = queryset.count()
    rows = list(queryset[(page - 1) * page_size : page * page_size])
    info = {"page": page, "page_size": page_size, "page_count": math.ceil(total / page_size), "total_rows": total}
    return rows, info
