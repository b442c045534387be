"""Audit log pages: the searchable list, one record, and a streaming CSV export."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render

from console.audit.filtersets import AuditRecordFilterSet
from console.audit.models import AuditRecord
from console.ui.pagination import paginate, sort_queryset
from console.ui.permissions import viewer_required

SORTABLE = (
    "created_at",
    "actor_username",
    "action",
    "object_type",
    "object_id",
    "status",
)


@viewer_required
def audit_list(request: HttpRequest) -> HttpResponse:
    fs = AuditRecordFilterSet(request.GET, queryset=AuditRecord.objects.all())
    qs, sort = sort_queryset(request, fs.qs, SORTABLE, "-created_at")
    page = paginate(request, qs)
    return render(
        request,
        "audit/auditrecord_list.html",
        {"filter": fs, "page": page, "sort": sort},
    )


@viewer_required
def audit_detail(request: HttpRequest, pk: int) -> HttpResponse:
    record = get_object_or_404(AuditRecord, pk=pk)
    return render(
        request,
        "audit/auditrecord.html",
        {
            "record": record,
            "before": json.dumps(record.before, indent=2, sort_keys=True),
            "after": json.dumps(record.after, indent=2, sort_keys=True),
        },
    )


class _Echo:
    def write(self, value: str) -> str:
        return value


CSV_FIELDS = (
    "id",
    "created_at",
    "actor_username",
    "action",
    "object_type",
    "object_id",
    "status",
    "reason",
    "message",
    "before",
    "after",
    "request_id",
    "ip",
)


def _csv_safe(value: object) -> str:
    # A cell starting with = + - @ is a formula to spreadsheets: neutralise it.
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _rows(queryset) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_FIELDS)
    for r in queryset.iterator(chunk_size=2000):
        yield writer.writerow(
            [
                r.id,
                r.created_at.isoformat(),
                _csv_safe(r.actor_username),
                r.action,
                r.object_type,
                _csv_safe(r.object_id),
                r.status,
                _csv_safe(r.reason),
                _csv_safe(r.message),
                json.dumps(r.before),
                json.dumps(r.after),
                r.request_id,
                r.ip or "",
            ]
        )


@viewer_required
def audit_export(request: HttpRequest) -> StreamingHttpResponse:
    fs = AuditRecordFilterSet(request.GET, queryset=AuditRecord.objects.all())
    qs, _ = sort_queryset(request, fs.qs, SORTABLE, "-created_at")
    response = StreamingHttpResponse(_rows(qs), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="audit.csv"'
    return response
